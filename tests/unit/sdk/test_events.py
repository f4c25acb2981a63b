"""Server-Sent Events as the SDK reads them, and `TetherClient.events` over a fake frontend."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tether.sdk import (
    EventGapView,
    RegionEventView,
    RegionSnapshotView,
    TetherAPIError,
    TetherClient,
)
from tether.sdk.events import ServerSentEvent, SseParser


def test_messages_end_at_blank_lines_and_keep_their_name_id_and_data() -> None:
    lines = [
        "retry: 1000",
        ": a comment",
        "",
        "data: one",
        "",
        "event: gap",
        "id: 12",
        "data: first line",
        "data:second line",
        "",
        "data: no blank line at the end",
    ]
    assert list(SseParser().parse(lines)) == [
        ServerSentEvent("message", "one", None),
        ServerSentEvent("gap", "first line\nsecond line", "12"),
    ]


def event(revision: int, kind: str = "job.submitted") -> dict[str, object]:
    return {"revision": revision, "kind": kind, "at": "2026-01-01T00:00:00Z", "job": "a/b"}


def sse(*messages: tuple[str | None, object, int | None]) -> bytes:
    text = ""
    for name, data, message_id in messages:
        text += f"event: {name}\n" if name else ""
        text += f"id: {message_id}\n" if message_id is not None else ""
        text += f"data: {json.dumps(data)}\n\n"
    return text.encode()


def test_events_are_views_and_a_gap_comes_with_a_snapshot() -> None:
    gap = {
        "type": "about:blank",
        "title": "Events no longer kept",
        "status": 410,
        "detail": "gone",
        "last_event_id": 3,
        "kept_after": 9,
    }
    body = sse(
        ("gap", gap, None),
        ("snapshot", {"revision": 9, "objects": [{"what": "job", "job": "a/b"}]}, 9),
        (None, event(10), 10),
    )
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    with TetherClient("http://t.test", "tok", transport=httpx.MockTransport(answer)) as client:
        found = list(client.events(job="a/b", kinds=["job"], follow=False, since=3))
    assert [type(item) for item in found] == [EventGapView, RegionSnapshotView, RegionEventView]
    assert isinstance(found[2], RegionEventView)
    assert found[2].revision == 10
    [request] = seen
    assert request.headers["Last-Event-ID"] == "3"
    assert request.url.params.get_list("kind") == ["job"]
    assert request.url.params["follow"] == "false"


def test_a_refusal_is_an_api_error() -> None:
    problem = {"type": "x", "title": "Validation failed", "status": 422, "detail": "bad kind"}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json=problem, headers={"content-type": "application/problem+json"}
        )

    with (
        TetherClient("http://t.test", transport=httpx.MockTransport(answer)) as client,
        pytest.raises(TetherAPIError, match="bad kind"),
    ):
        list(client.events(kinds=["nope"], follow=False))


class Dropping(httpx.SyncByteStream):
    """A body that breaks after `body`, as a connection to a frontend that went away."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        yield self.body
        raise httpx.ReadError("the frontend went away")


def test_a_dropped_follow_resumes_after_the_last_revision_seen() -> None:
    first = Dropping(sse((None, event(5), 5), (None, event(6), 6)))
    bodies: Iterator[Dropping | bytes] = iter([first, sse((None, event(7), 7))])
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        body = next(bodies)
        headers = {"content-type": "text/event-stream"}
        if isinstance(body, bytes):
            return httpx.Response(200, content=body, headers=headers)
        return httpx.Response(200, stream=body, headers=headers)

    drops: list[tuple[str, int | None]] = []
    with TetherClient("http://t.test", transport=httpx.MockTransport(answer)) as client:
        stream = client.events(on_drop=lambda reason, last: drops.append((reason, last)))
        revisions = [next(stream).revision for _ in range(3)]  # type: ignore[union-attr]
    assert revisions == [5, 6, 7]
    assert seen == [None, "6"]
    assert drops == [("the frontend went away", 6)]
