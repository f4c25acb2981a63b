"""The agent's read-only HTTP endpoint: task logs from the work dir, and a liveness probe."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, Final

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import TypeAdapter, ValidationError

from tether.agent.workdir import STREAMS, TaskRef, WorkDir, tail
from tether.model import Name

MAX_TAIL_BYTES: Final = 16 * 1024 * 1024
DEFAULT_TAIL_BYTES: Final = 65_536
STOP_TIMEOUT_S: Final = 2
_NAME: TypeAdapter[str] = TypeAdapter(Name)


def problem(status: HTTPStatus, detail: str, **extra: Any) -> JSONResponse:
    """An `application/problem+json` error response."""
    body = {"type": "about:blank", "title": status.phrase, "status": status.value, "detail": detail}
    return JSONResponse(body | extra, status_code=status, media_type="application/problem+json")


def _valid_name(text: str) -> bool:
    try:
        _NAME.validate_python(text)
    except ValidationError:
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


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The process's SIGINT/SIGTERM belong to tether.service, which stops the whole agent.
        yield


class LogServer:
    """Serves `log_app` on the running event loop; `port` is known once `start()` returns."""

    def __init__(self, work_dir: WorkDir, host: str, port: int) -> None:
        config = uvicorn.Config(
            log_app(work_dir),
            host=host,
            port=port,
            lifespan="off",
            access_log=False,
            # Log through the process's own handlers and format (tether.service).
            log_config=None,
            # A client that keeps a request open must not hold up the agent's stop.
            timeout_graceful_shutdown=STOP_TIMEOUT_S,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(), name="agent http")
        while not self._server.started:
            if self._task.done():
                # uvicorn reports a failed bind by logging it and exiting.
                with contextlib.suppress(SystemExit):
                    self._task.result()
                raise RuntimeError("the agent's HTTP server did not start (see the log above)")
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._task is not None:
            self._server.should_exit = True
            await self._task
            self._task = None
