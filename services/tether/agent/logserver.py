"""The agent's read-only HTTP endpoint: task logs from the work dir, and a liveness probe."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from tether.agent.workdir import STREAMS, TaskRef, WorkDir, tail
from tether.config import TlsSettings
from tether.model import check_name
from tether.service import HttpServer

MAX_TAIL_BYTES: Final = 16 * 1024 * 1024
DEFAULT_TAIL_BYTES: Final = 65_536
STOP_TIMEOUT_S: Final = 2


def problem(status: HTTPStatus, detail: str, **extra: Any) -> JSONResponse:
    """An `application/problem+json` error response."""
    body = {"type": "about:blank", "title": status.phrase, "status": status.value, "detail": detail}
    return JSONResponse(body | extra, status_code=status, media_type="application/problem+json")


def _valid_name(text: str) -> bool:
    try:
        check_name(text, "name")
    except ValueError:
        return False
    return True


def log_app(work_dir: WorkDir) -> FastAPI:
    """The FastAPI app serving the logs of the tasks under `work_dir`."""
    app = FastAPI(title="Tether agent", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(item.get("loc", ())), "msg": str(item.get("msg", ""))}
            for item in error.errors()
        ]
        return problem(HTTPStatus.BAD_REQUEST, "invalid request parameters", errors=errors)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/tasks/{entitlement}/{job}/{index}/logs", response_model=None)
    def task_logs(
        entitlement: str,
        job: str,
        index: int,
        stream: str = "stdout",
        tail_bytes: int = Query(DEFAULT_TAIL_BYTES, ge=0, le=MAX_TAIL_BYTES),
        attempt: int | None = Query(None, ge=0),
    ) -> Response:
        if stream not in STREAMS:
            detail = f"stream must be one of {', '.join(STREAMS)}, not {stream!r}"
            return problem(HTTPStatus.BAD_REQUEST, detail)
        task_id = f"{entitlement}/{job}/{index}"
        # Names are checked before they become paths: '..' is no entitlement.
        attempts = (
            work_dir.attempts(TaskRef(entitlement, job, index))
            if _valid_name(entitlement) and _valid_name(job) and index >= 0
            else []
        )
        if not attempts:
            return problem(HTTPStatus.NOT_FOUND, f"task {task_id} has never run on this machine")
        chosen = attempts[-1] if attempt is None else attempt
        if chosen not in attempts:
            return problem(
                HTTPStatus.NOT_FOUND, f"attempt {chosen} of task {task_id} is not on this machine"
            )
        files = work_dir.attempt(TaskRef(entitlement, job, index), chosen)
        return Response(
            tail(files.log(stream), tail_bytes),
            media_type="text/plain; charset=utf-8",
            headers={"X-Tether-Attempt": str(chosen)},
        )

    return app


def log_server(work_dir: WorkDir, host: str, port: int, tls: TlsSettings) -> HttpServer:
    """The agent's HTTP server; its `port` is known once `start()` returns. Under mutual TLS it
    answers only clients with a certificate of the region (the frontends)."""
    return HttpServer(
        log_app(work_dir),
        host,
        port,
        name="agent http",
        lifespan="off",
        access_log=False,
        # A client that keeps a request open must not hold up the agent's stop.
        graceful_shutdown_s=STOP_TIMEOUT_S,
        tls=tls,
        verify_clients=tls.mutual,
    )
