"""A lean HTTP/1.1 client for read loads: one keep-alive connection, one GET at a time, the
answer parsed by httptools (uvicorn's parser) and its body dropped. httpx costs a client about
twice the CPU a cached GET costs the frontend, so on two cores a load of httpx clients measures
mostly itself."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httptools


class _Answers(asyncio.Protocol):
    """The connection's protocol: completes `waiting` with each answer's status code."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiting: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(ConnectionError(f"unparseable answer: {error}"))

    def on_message_complete(self) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(self._parser.get_status_code())

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the server closed the connection"))

    def _fail(self, error: Exception) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class RawClient:
    """GETs from one server over one connection, opened (again) when needed. Every request
    carries `headers`."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._timeout_s = timeout_s
        self._answers: _Answers | None = None

    async def get(self, path: str) -> int:
        """The status code of a GET of `path`; OSError or TimeoutError when none came."""
        answers = self._answers
        if answers is None or answers.transport is None or answers.transport.is_closing():
            loop = asyncio.get_running_loop()
            _, answers = await loop.create_connection(_Answers, self._host, self._port)
            self._answers = answers
        assert answers.transport is not None
        answers.waiting = asyncio.get_running_loop().create_future()
        request = f"GET {path} HTTP/1.1\r\nHost: {self._host}\r\n{self._headers}\r\n"
        answers.transport.write(request.encode())
        try:
            async with asyncio.timeout(self._timeout_s):
                return await answers.waiting
        except BaseException:
            answers.transport.close()
            self._answers = None
            raise

    def close(self) -> None:
        if self._answers is not None and self._answers.transport is not None:
            self._answers.transport.close()
