"""Following `GET /v1/events`: Server-Sent Events read line by line, and a stream that resumes
after the last revision it saw when its connection drops."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from pydantic import ValidationError

from tether.sdk.errors import TetherAPIError, TetherConnectionError, problem_error
from tether.sdk.views import EventGapView, RegionEventView, RegionSnapshotView

EVENT_STREAM: Final = "text/event-stream"
RECONNECT_S: Final = (0.5, 5.0)
"""The wait before reconnecting a dropped stream: first, and at most (it doubles)."""
READ_TIMEOUT_S: Final = 60.0
"""A stream silent this long is taken for dropped (the frontend sends a comment every 15 s)."""

Followed = RegionEventView | EventGapView | RegionSnapshotView


@dataclass
class ServerSentEvent:
    """One message: its `event` name ("message" when unnamed), `data`, and `id` if it set one."""

    event: str = "message"
    data: str = ""
    id: str | None = None


@dataclass
class SseParser:
    """Turns a stream's lines into messages (the WHATWG rules for event, data, id; comments and
    retry are skipped)."""

    last_id: str | None = None
    """The id of the last block that ended, with data or without (a position the server sent):
    where a reconnect resumes, as a browser's EventSource keeps it."""
    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        """The message a blank line ends, else None."""
        if not line:
            if self._id is not None:
                self.last_id = self._id
            if not self._data:
                self._event, self._id = "", None
                return None
            found = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data, self._id = "", [], None
            return found
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def parse(self, lines: Iterable[str]) -> Iterator[ServerSentEvent]:
        for line in lines:
            found = self.feed(line)
            if found is not None:
                yield found


def view_of(message: ServerSentEvent) -> Followed:
    """The view a message holds; TetherAPIError for one the SDK cannot read."""
    try:
        data: Any = json.loads(message.data)
        if message.event == "gap":
            return EventGapView.model_validate(data)
        if message.event == "snapshot":
            return RegionSnapshotView.model_validate(data)
        return RegionEventView.model_validate(data)
    except (ValueError, ValidationError) as error:
        detail = f"an event the SDK cannot read ({message.event}): {error}"
        raise TetherAPIError(200, "Unexpected response", detail) from None


def follow(
    http: httpx.Client,
    params: Mapping[str, Any],
    *,
    since: int | None,
    reconnect: bool,
    on_drop: Callable[[str, int | None], None] | None = None,
) -> Iterator[Followed]:
    """The events `GET /v1/events` streams with `params`, after revision `since`; with
    `reconnect`, a dropped stream is opened again after the last revision seen, and `on_drop`
    is told why it dropped and that revision."""
    last = since
    backoff = RECONNECT_S[0]
    connected = False
    while True:
        headers = {"Accept": EVENT_STREAM}
        if last is not None:
            headers["Last-Event-ID"] = str(last)
        timeout = httpx.Timeout(http.timeout.connect, read=READ_TIMEOUT_S)
        try:
            with http.stream(
                "GET", "/v1/events", params=params, headers=headers, timeout=timeout
            ) as response:
                if response.is_error:
                    response.read()
                    raise problem_error(response)
                connected = True
                parser = SseParser()
                for line in response.iter_lines():
                    message = parser.feed(line)
                    if parser.last_id is not None and parser.last_id.isdigit():
                        last = int(parser.last_id)
                    if message is not None:
                        backoff = RECONNECT_S[0]
                        yield view_of(message)
            if not reconnect:
                return
        except httpx.TransportError as error:
            reason = str(error) or type(error).__name__
            if not reconnect or not connected:
                raise TetherConnectionError(str(http.base_url), reason) from error
            if on_drop is not None:
                on_drop(reason, last)
        time.sleep(backoff)
        backoff = min(backoff * 2, RECONNECT_S[1])
