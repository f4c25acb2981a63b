"""Problem+json formatting: bodies, headers, field errors and the unparsable-body rule."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tether.frontend.problems import (
    PROBLEM_JSON,
    BadRequest,
    InvalidInput,
    OverQuota,
    Problem,
    Unauthenticated,
    Unavailable,
    UnexpectedErrors,
    field_errors,
    invalid_body_detail,
    is_unparsable,
    problem_response,
)
from tether.model import JobSpec, from_json


def body(problem: Problem) -> dict[str, object]:
    response = problem.response()
    assert response.media_type == PROBLEM_JSON
    assert response.status_code == problem.status
    decoded: dict[str, object] = json.loads(bytes(response.body))
    return decoded


def test_problem_body_has_type_title_status_detail_and_no_errors_when_none() -> None:
    assert body(OverQuota("cpu: need 2, 1 free")) == {
        "type": "urn:tether:problem:over-quota",
        "title": "Over quota",
        "status": 409,
        "detail": "cpu: need 2, 1 free",
    }


def test_validation_problem_lists_field_errors() -> None:
    problem = InvalidInput("bad", errors=field_errors([{"loc": ("count",), "msg": "too big"}]))
    assert body(problem)["errors"] == [{"loc": ["count"], "msg": "too big"}]
    assert problem.status == 422


def test_unauthenticated_asks_for_a_bearer_token_and_unavailable_for_a_retry() -> None:
    assert Unauthenticated("no token").response().headers["www-authenticate"] == "Bearer"
    assert Unavailable("store down").response().headers["retry-after"] == "1"
    assert "www-authenticate" not in BadRequest("x").response().headers


def test_a_uri_type_is_kept_as_given() -> None:
    response = problem_response(405, "Method Not Allowed", "no", "about:blank")
    assert json.loads(bytes(response.body))["type"] == "about:blank"


def test_field_errors_are_the_path_of_each_pydantic_error() -> None:
    with pytest.raises(ValidationError) as caught:
        from_json(JobSpec, json.dumps({"name": "Web", "entitlement": "t", "count": 1}))
    errors = field_errors(caught.value.errors(), prefix=("body",))
    locs = [error.loc for error in errors]
    assert ["body", "name"] in locs
    assert ["body", "task"] in locs
    detail = invalid_body_detail(errors)
    assert detail.startswith("invalid request: ")
    assert "body.name: " in detail
    assert "body.task: Field required" in detail


def test_an_error_at_the_root_is_named_body() -> None:
    errors = field_errors([{"loc": (), "msg": "Input should be an object"}])
    assert invalid_body_detail(errors) == "invalid request: (body): Input should be an object"


def test_only_unparsable_json_counts_as_unparsable() -> None:
    with pytest.raises(ValidationError) as not_json:
        from_json(JobSpec, b"{nope")
    with pytest.raises(ValidationError) as invalid:
        from_json(JobSpec, b"{}")
    assert is_unparsable(not_json.value.errors())
    assert not is_unparsable(invalid.value.errors())


async def test_unexpected_errors_become_a_500_problem_without_a_traceback() -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("secret internals")

    app = Starlette(routes=[Route("/", broken)], middleware=[Middleware(UnexpectedErrors)])
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/")
    assert response.status_code == 500
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["type"] == "urn:tether:problem:internal-error"
    assert "secret" not in response.text
    assert "Traceback" not in response.text
