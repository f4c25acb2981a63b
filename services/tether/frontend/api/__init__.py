"""The REST API's routers, one module per resource, and what they share."""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, Final

from fastapi import Path
from pydantic import BaseModel

from tether.frontend.problems import PROBLEM_JSON, ProblemDetails
from tether.model import Name

EntitlementName = Annotated[Name, Path(description="The entitlement's name.")]
JobName = Annotated[Name, Path(description="The job's name within its entitlement.")]


def problem_content() -> dict[str, Any]:
    """An error's OpenAPI `content`: FastAPI's `model` would document it as application/json,
    which no error is; create_app adds ProblemDetails to the components."""
    return {PROBLEM_JSON: {"schema": {"$ref": f"#/components/schemas/{ProblemDetails.__name__}"}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` documenting problem+json answers with these statuses."""
    return {
        status: {"description": HTTPStatus(status).phrase, "content": problem_content()}
        for status in statuses
    }


AUTH_PROBLEMS: Final = problems(401, 403, 503)


def request_body(model: type[BaseModel], description: str, *, yaml: bool = False) -> dict[str, Any]:
    """`openapi_extra` documenting a body that the route reads and validates itself (strict
    JSON-mode validation, which FastAPI's body parameters would not do); create_app adds
    `model`'s schema to the components."""
    schema = {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
    content = {"application/json": schema} | ({"application/yaml": schema} if yaml else {})
    return {"requestBody": {"required": True, "description": description, "content": content}}
