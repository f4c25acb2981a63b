"""Errors as RFC 9457 problem+json: the exception hierarchy routes raise, and their handlers."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from types import MappingProxyType
from typing import Any, ClassVar, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.store import StoreUnavailable

PROBLEM_JSON: Final = "application/problem+json"
TYPE_PREFIX: Final = "urn:tether:problem:"

log = logging.getLogger(__name__)

Loc = list[str | int]


class FieldError(BaseModel):
    """Where a request is invalid (`loc`, the path of the field) and why (`msg`)."""

    loc: Loc
    msg: str


class ProblemDetails(BaseModel):
    """The body of every error response."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


class Problem(Exception):
    """An error a route answers with; subclasses fix its status, type and title."""

    status: ClassVar[int] = HTTPStatus.INTERNAL_SERVER_ERROR
    type: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal server error"
    headers: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def __init__(self, detail: str, *, errors: list[FieldError] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors

    def response(self) -> JSONResponse:
        """The problem+json response describing this error."""
        return problem_response(
            self.status, self.title, self.detail, self.type, self.errors, self.headers
        )


class BadRequest(Problem):
    status = HTTPStatus.BAD_REQUEST
    type = "bad-request"
    title = "Bad request"


class Unauthenticated(Problem):
    status = HTTPStatus.UNAUTHORIZED
    type = "unauthenticated"
    title = "Authentication required"
    headers = MappingProxyType({"WWW-Authenticate": "Bearer"})


class Forbidden(Problem):
    status = HTTPStatus.FORBIDDEN
    type = "forbidden"
    title = "Forbidden"


class NotFound(Problem):
    status = HTTPStatus.NOT_FOUND
    type = "not-found"
    title = "Not found"


class Conflict(Problem):
    status = HTTPStatus.CONFLICT
    type = "conflict"
    title = "Conflict"


NAMES_SHOWN: Final = 10
"""Names a refusal lists; the rest are counted."""


def some_names(names: Sequence[str]) -> str:
    """`a, b, c` for a refusal's detail: the first NAMES_SHOWN, and how many more."""
    shown = ", ".join(names[:NAMES_SHOWN])
    rest = len(names) - NAMES_SHOWN
    return shown + (f" and {rest} more" if rest > 0 else "")


class OverQuota(Conflict):
    type = "over-quota"
    title = "Over quota"


class PayloadTooLarge(Problem):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    type = "payload-too-large"
    title = "Request body too large"


class InvalidInput(Problem):
    status = HTTPStatus.UNPROCESSABLE_ENTITY
    type = "invalid-input"
    title = "Validation failed"


class CorruptRecord(Problem):
    """A record in the store does not validate: a bug or a hand-edited store, never the user."""

    type = "corrupt-record"
    title = "Invalid record in the store"


class BadGateway(Problem):
    status = HTTPStatus.BAD_GATEWAY
    type = "bad-gateway"
    title = "Unexpected answer from an agent"


class Unavailable(Problem):
    status = HTTPStatus.SERVICE_UNAVAILABLE
    type = "unavailable"
    title = "Service unavailable"
    headers = MappingProxyType({"Retry-After": "1"})


def problem_response(
    status: int,
    title: str,
    detail: str,
    type_: str = "about:blank",
    errors: list[FieldError] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem+json response; `type_` is a slug under TYPE_PREFIX, or a URI."""
    body = ProblemDetails(
        type=type_ if ":" in type_ else TYPE_PREFIX + type_,
        title=title,
        status=status,
        detail=detail,
        errors=errors,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=status,
        headers=dict(headers or {}),
        media_type=PROBLEM_JSON,
    )


def field_errors(
    errors: Iterable[Mapping[str, Any]], prefix: Sequence[str] = ()
) -> list[FieldError]:
    """`{loc, msg}` for each pydantic error, `loc` being the field path under `prefix`."""
    return [
        FieldError(loc=[*prefix, *error.get("loc", ())], msg=str(error.get("msg", "")))
        for error in errors
    ]


def invalid_body_detail(errors: Sequence[FieldError]) -> str:
    """One line naming every invalid field, for clients that show only `detail`."""
    parts = [f"{'.'.join(map(str, error.loc)) or '(body)'}: {error.msg}" for error in errors]
    return "invalid request: " + "; ".join(parts)


def is_unparsable(errors: Iterable[Mapping[str, Any]]) -> bool:
    """Whether pydantic failed because the body is not JSON at all (400, not 422)."""
    return any(error.get("type") == "json_invalid" for error in errors)


def validation_problem(
    errors: Sequence[Mapping[str, Any]],
    prefix: Sequence[str] = (),
    *,
    unparsable_hint: str | None = None,
) -> Problem:
    """What input that failed validation answers: 400 when the body is not JSON at all, else
    422 naming every invalid field (its path under `prefix`).

    Bodies a route parses itself pass `unparsable_hint`; their 400 then also gives pydantic's
    reason, which for FastAPI's own bodies would only say "JSON decode error".
    """
    if is_unparsable(errors):
        if unparsable_hint is None:
            return BadRequest("the request body is not valid JSON")
        return BadRequest(
            f"the request body is not valid JSON ({unparsable_hint}): {errors[0].get('msg')}"
        )
    fields = field_errors(errors, prefix)
    return InvalidInput(invalid_body_detail(fields), errors=fields)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    # Only the frontend's own failures; 503s (store down, region not ready) are expected.
    if exc.status == HTTPStatus.INTERNAL_SERVER_ERROR:
        log.error("%s %s: %s", request.method, request.url.path, exc.detail)
    return exc.response()


async def on_http_exception(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors as problems: unknown route (404), wrong method (405)."""
    assert isinstance(exc, HTTPException)
    phrase = HTTPStatus(exc.status_code).phrase
    detail = exc.detail if isinstance(exc.detail, str) else phrase
    if exc.status_code == HTTPStatus.NOT_FOUND and detail == phrase:
        detail = f"no such route: {request.url.path}"
    return problem_response(exc.status_code, phrase, detail, headers=exc.headers)


async def _on_request_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_problem(exc.errors()).response()


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    # Routes validate user input explicitly; this catches any model built from request data
    # that they did not wrap, so that it is still a 422 rather than a crash.
    assert isinstance(exc, ValidationError)
    return validation_problem(exc.errors()).response()


async def _on_store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("%s %s: store unavailable: %s", request.method, request.url.path, exc)
    return Unavailable(f"the region's store cannot be reached: {exc}").response()


class UnexpectedErrors:
    """ASGI middleware: any other exception becomes a 500 problem without a traceback.

    Starlette's catch-all handler re-raises after answering, so the server would log every
    error a second time; this middleware logs it once and answers.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            response = Problem("an unexpected error occurred; the frontend's log has details")
            await response.response()(scope, receive, send)


def install(app: FastAPI) -> None:
    """Make every error of `app` a problem+json response."""
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(HTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, _on_request_validation)
    app.add_exception_handler(ValidationError, _on_validation_error)
    app.add_exception_handler(StoreUnavailable, _on_store_unavailable)
    app.add_middleware(UnexpectedErrors)
