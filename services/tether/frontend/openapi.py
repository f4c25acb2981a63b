"""The OpenAPI document the frontend serves: FastAPI's, made to say what the routes really do."""

from __future__ import annotations

import json
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tether.frontend.api import BODY_MODELS, STREAMED_MODELS, problem_content
from tether.frontend.problems import ProblemDetails
from tether.frontend.revisions import REVISION_HEADER

_REF: Final = "#/components/schemas/{model}"


def document(app: FastAPI) -> dict[str, Any]:
    """`app`'s OpenAPI document (cached like FastAPI's): every error a problem+json, and the
    schemas of the request bodies routes parse themselves (BODY_MODELS), of what event streams
    send (STREAMED_MODELS) and of ProblemDetails added."""
    if app.openapi_schema is None:
        openapi = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
        _add_bodies(openapi, schemas)
        answered: list[type[BaseModel]] = [ProblemDetails, *STREAMED_MODELS.values()]
        _, problem = models_json_schema(
            [(model, "serialization") for model in answered], ref_template=_REF
        )
        schemas.update(problem.get("$defs", {}))
        _problem_422s(openapi, schemas)
        _cached_reads(openapi)
        for schema in schemas.values():
            _close_pattern_properties(schema)
        app.openapi_schema = openapi
    return app.openapi_schema


def _add_bodies(openapi: dict[str, Any], schemas: dict[str, Any]) -> None:
    """Adds the validation schemas of BODY_MODELS. A body model that responses show too, and
    whose schema as a request differs (JobSpec: its count's maximum), is added as
    `<name>-Input`, and the request bodies refer to that."""
    _, definitions = models_json_schema(
        [(model, "validation") for model in BODY_MODELS.values()], ref_template=_REF
    )
    inputs: dict[str, Any] = definitions.get("$defs", {})
    renamed = {
        model.__name__: f"{model.__name__}-Input"
        for model in BODY_MODELS.values()
        if model.__name__ in schemas
        and model.model_json_schema(mode="validation")
        != model.model_json_schema(mode="serialization")
    }
    text = json.dumps({"inputs": inputs, "paths": openapi["paths"]})
    for name, new in renamed.items():
        text = text.replace(f'"{_REF.format(model=name)}"', f'"{_REF.format(model=new)}"')
    rewritten = json.loads(text)
    openapi["paths"] = rewritten["paths"]
    for name, schema in rewritten["inputs"].items():
        schemas.setdefault(renamed.get(name, name), schema)


def _problem_422s(openapi: dict[str, Any], schemas: dict[str, Any]) -> None:
    """FastAPI documents a 422 with its own body on every route whose parameters it validates;
    problems.install answers those with a problem instead."""
    for path in openapi["paths"].values():
        for operation in path.values():
            invalid = operation["responses"].get("422")
            if invalid is not None:
                invalid["content"] = problem_content()
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def _cached_reads(openapi: dict[str, Any]) -> None:
    """A GET answered from the cache (revisions.ReadsDep, which takes `min_revision`) names its
    revision and content in headers, and answers 304 to an `If-None-Match` naming its
    content."""
    headers = {
        REVISION_HEADER: {
            "description": "The store revision the answer reflects.",
            "schema": {"type": "integer", "minimum": 1},
        },
        "ETag": {"description": "Names the answer's content.", "schema": {"type": "string"}},
    }
    for path in openapi["paths"].values():
        operation = path.get("get")
        if operation is None or not any(
            parameter["name"] == "min_revision" for parameter in operation.get("parameters", [])
        ):
            continue
        responses = operation["responses"]
        responses["200"].setdefault("headers", {}).update(headers)
        responses.setdefault("304", {"description": "Not Modified: the If-None-Match names it."})


def _close_pattern_properties(schema: Any) -> None:
    """Pydantic documents a dict whose keys follow a pattern (`dict[Name, int]`) with
    `patternProperties` alone, which lets any other key through; the models refuse them."""
    if isinstance(schema, dict):
        if "patternProperties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _close_pattern_properties(value)
    elif isinstance(schema, list):
        for value in schema:
            _close_pattern_properties(value)
