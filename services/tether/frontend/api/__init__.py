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

BODY_MODELS: Final[dict[str, type[BaseModel]]] = {}
"""Every model `request_body` documented, by name: FastAPI does not know their schemas, and
openapi.document adds them to the components."""


STREAMED_MODELS: Final[dict[str, type[BaseModel]]] = {}
"""Every model `streamed` documented: what a text/event-stream route sends as its messages'
data, added to the components by openapi.document."""


def streamed(media_type: str, *models: type[BaseModel]) -> dict[str, Any]:
    """The `content` of a Server-Sent Events response whose messages' data is one of `models`
    (as JSON). Before OpenAPI 3.2 the schema of an event stream describes one message."""
    for model in models:
        known = STREAMED_MODELS.setdefault(model.__name__, model)
        assert known is model, f"two streamed models are named {model.__name__}"
    refs = [{"$ref": f"#/components/schemas/{model.__name__}"} for model in models]
    message = {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"oneOf": refs},
            },
        },
    }
    return {media_type: {"schema": message}}


def request_body(
    model: type[BaseModel], description: str, *, yaml: bool = False, required: bool = True
) -> dict[str, Any]:
    """`openapi_extra` documenting a body that the route reads and validates itself (strict
    JSON-mode validation, which FastAPI's body parameters would not do); `required=False` for
    a route that takes no body as the model's defaults."""
    known = BODY_MODELS.setdefault(model.__name__, model)
    assert known is model, f"two request bodies are named {model.__name__}"
    schema = {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
    content = {"application/json": schema} | ({"application/yaml": schema} if yaml else {})
    return {"requestBody": {"required": required, "description": description, "content": content}}
