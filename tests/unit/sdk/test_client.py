"""TetherClient against an httpx.MockTransport: request building, views, error mapping."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.support.api import JOB, machine, problem, region, shard, task
from tether.sdk import (
    JSON,
    YAML,
    ClientSettings,
    FieldError,
    TetherAPIError,
    TetherClient,
    TetherConnectionError,
)

Handler = Callable[[httpx.Request], httpx.Response]
URL = "http://tether.test:8080"


class Recorder:
    """A MockTransport handler that answers with fixed responses and keeps every request."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.response

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


def client(handler: Handler, token: str | None = "s3cret") -> TetherClient:
    return TetherClient(URL, token, transport=httpx.MockTransport(handler))


def test_every_request_carries_the_bearer_token() -> None:
    recorder = Recorder(httpx.Response(200, json={"jobs": []}))
    client(recorder).list_jobs()
    assert recorder.last.headers["Authorization"] == "Bearer s3cret"
    assert recorder.last.headers["User-Agent"].startswith("tether-sdk/")
    assert str(recorder.last.url) == f"{URL}/v1/jobs"


def test_without_a_token_no_authorization_header_is_sent() -> None:
    recorder = Recorder(httpx.Response(200, json={"jobs": []}))
    client(recorder, token=None).list_jobs()
    assert "Authorization" not in recorder.last.headers


def test_submit_yaml_text_sends_it_verbatim_with_the_idempotency_key() -> None:
    recorder = Recorder(httpx.Response(201, json=JOB))
    spec = "name: web\nentitlement: team-a\ncount: 2\n"
    job = client(recorder).submit_job(spec, YAML, idempotency_key="deploy-42")
    request = recorder.last
    assert (request.method, request.url.path) == ("POST", "/v1/jobs")
    assert request.headers["Content-Type"] == "application/yaml"
    assert request.headers["Idempotency-Key"] == "deploy-42"
    assert request.content == spec.encode()
    assert job.handle == "team-a/web"
    assert job.tasks == {"running": 1, "pending": 1}
    assert job.created_at is not None
    assert job.created_at.year == 2025


def test_submit_a_mapping_sends_json_with_an_idempotency_key_of_its_own() -> None:
    recorder = Recorder(httpx.Response(201, json=JOB))
    tether = client(recorder)
    tether.submit_job({"name": "web", "count": 2}, YAML)
    tether.submit_job({"name": "web", "count": 2}, YAML)
    first, second = recorder.requests
    assert first.headers["Content-Type"] == JSON
    assert json.loads(first.content) == {"name": "web", "count": 2}
    # A fresh one per call: submitting again on purpose is not a retry.
    assert first.headers["Idempotency-Key"].startswith("sdk-")
    assert first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]


def test_list_jobs_filters_by_entitlement_and_ignores_unknown_fields() -> None:
    recorder = Recorder(httpx.Response(200, json={"jobs": [JOB]}))
    jobs = client(recorder).list_jobs("team-a")
    assert recorder.last.url.params["entitlement"] == "team-a"
    assert [(job.handle, job.count, job.running) for job in jobs] == [("team-a/web", 2, 1)]


def test_job_paths_and_bodies() -> None:
    recorder = Recorder(httpx.Response(200, json={**JOB, "count": 5, "generation": 2}))
    tether = client(recorder)
    assert tether.get_job("team-a/web").count == 5
    assert (recorder.last.method, recorder.last.url.path) == ("GET", "/v1/jobs/team-a/web")
    scaled = tether.scale_job("team-a/web", 5)
    assert (recorder.last.method, recorder.last.url.path) == ("POST", "/v1/jobs/team-a/web/scale")
    assert json.loads(recorder.last.content) == {"count": 5}
    assert scaled.generation == 2
    tether.suspend_job("team-a/web")
    assert (recorder.last.method, recorder.last.url.path) == ("PATCH", "/v1/jobs/team-a/web")
    assert json.loads(recorder.last.content) == {"suspended": True}
    on_v100 = {"constraints": [{"attribute": "gpu_type", "op": "==", "value": "v100"}]}
    tether.resume_job("team-a/web", placement=on_v100)
    assert json.loads(recorder.last.content) == {"suspended": False, "placement": on_v100}
    recorder.response = httpx.Response(200, json={"name": "fast", "throughputs": {}})
    table = {"v100": {"ResNet-50": {"1": 4.39}}}
    assert tether.put_throughput_profile("team-a/fast", table)["name"] == "fast"
    assert (recorder.last.method, recorder.last.url.path) == (
        "PUT",
        "/v1/throughput-profiles/team-a/fast",
    )
    assert json.loads(recorder.last.content) == {"throughputs": table}
    tether.get_throughput_profile("team-a/fast")
    assert recorder.last.method == "GET"
    with pytest.raises(ValueError, match="invalid throughput profile 'Not Ok'"):
        tether.get_throughput_profile("team-a/Not Ok")
    recorder.response = httpx.Response(202, json={"handle": "team-a/web", "deleting": True})
    tether.delete_job("team-a/web")
    assert (recorder.last.method, recorder.last.url.path) == ("DELETE", "/v1/jobs/team-a/web")


def test_list_tasks_parses_task_views() -> None:
    recorder = Recorder(httpx.Response(200, json={"tasks": [task(0, "running", "m-1")]}))
    [view] = client(recorder).list_tasks("team-a/web")
    assert recorder.last.url.path == "/v1/jobs/team-a/web/tasks"
    assert (view.index, view.state, view.machine, view.pid) == (0, "running", "m-1", 1000)
    assert view.started_at is not None
    assert view.started_at.tzinfo is not None


def test_task_logs_asks_for_a_stream_and_tail_and_returns_bytes() -> None:
    recorder = Recorder(
        httpx.Response(200, content=b"hello\n\xff", headers={"content-type": "text/plain"})
    )
    data = client(recorder).task_logs("team-a/web", 3, "stderr", 100)
    assert recorder.last.url.path == "/v1/jobs/team-a/web/tasks/3/logs"
    assert dict(recorder.last.url.params) == {"stream": "stderr", "tail_bytes": "100"}
    assert data == b"hello\n\xff"


def test_machines_and_region_views() -> None:
    allocator = {"id": "allocator-0", "address": "127.0.0.1:7000", "pid": 10}
    answer = region(
        shards=[shard("shard-0", "host:1:abc", entitlements=["team-a"])],
        allocators=[allocator | {"since": "2025-01-02T03:04:05Z"}],
        machines={"total": 4, "up": 3, "down": 1},
        jobs=2,
        tasks={"running": 5},
    )
    recorder = Recorder(httpx.Response(200, json={"machines": [machine("m-1", cpu=1500)]}))
    tether = client(recorder)
    [view] = tether.list_machines()
    assert (view.topology.dc, view.allocated.cpu, view.capacity.memory_mib) == ("dc1", 1500, 4096)
    recorder.response = httpx.Response(200, json=answer)
    summary = tether.region()
    assert recorder.last.url.path == "/v1/region"
    assert summary.shards[0].leader == "host:1:abc"
    assert summary.allocators[0].address == "127.0.0.1:7000"
    assert (summary.machines.total, summary.machines.down) == (4, 1)
    # An answer without a field the frontend always sends is not the frontend's.
    recorder.response = httpx.Response(200, json=answer | {"allocators": [allocator]})
    with pytest.raises(TetherAPIError, match="expected a RegionView from the frontend"):
        tether.region()


def test_entitlements_and_principals() -> None:
    recorder = Recorder(httpx.Response(200, json={"entitlements": [{"name": "team-a"}]}))
    tether = client(recorder)
    assert tether.list_entitlements() == [{"name": "team-a"}]
    recorder.response = httpx.Response(201, json={"name": "team-c", "shard": "shard-1"})
    assert tether.create_entitlement({"name": "team-c"})["shard"] == "shard-1"
    assert json.loads(recorder.last.content) == {"name": "team-c"}
    recorder.response = httpx.Response(201, json={"name": "bob", "roles": [], "token": "t0k"})
    created = tether.create_principal("bob", [])
    assert (recorder.last.method, recorder.last.url.path) == ("POST", "/admin/principals")
    assert json.loads(recorder.last.content) == {"name": "bob", "roles": []}
    assert created.token == "t0k"


def test_host_profile_paths_bodies_and_views() -> None:
    web = {"name": "web", "description": "", "settings": {"hugepages": "2048"}, "switch_seconds": 2}
    recorder = Recorder(httpx.Response(201, json=web))
    tether = client(recorder)
    created = tether.create_host_profile({"name": "web", "settings": {"hugepages": "2048"}})
    assert (recorder.last.method, recorder.last.url.path) == ("POST", "/v1/host-profiles")
    assert json.loads(recorder.last.content) == {"name": "web", "settings": {"hugepages": "2048"}}
    assert (created.name, created.settings, created.switch_seconds) == ("web", web["settings"], 2.0)
    recorder.response = httpx.Response(200, json={"host_profiles": [web, {"name": "batch"}]})
    assert [profile.name for profile in tether.list_host_profiles()] == ["web", "batch"]
    assert recorder.last.url.path == "/v1/host-profiles"
    recorder.response = httpx.Response(200, json=web)
    assert tether.get_host_profile("web") == created
    assert (recorder.last.method, recorder.last.url.path) == ("GET", "/v1/host-profiles/web")
    assert tether.delete_host_profile("web") == created
    assert (recorder.last.method, recorder.last.url.path) == ("DELETE", "/v1/host-profiles/web")
    # A name is one path segment, whatever it holds (the frontend refuses it then).
    tether.get_host_profile("a/b")
    assert recorder.last.url.raw_path == b"/v1/host-profiles/a%2Fb"


def test_a_refused_profile_deletion_says_who_uses_it() -> None:
    detail = "host profile 'web' is in use: entitlement(s) ads name it"
    recorder = Recorder(problem(409, "Conflict", detail))
    with pytest.raises(TetherAPIError) as raised:
        client(recorder).delete_host_profile("web")
    assert (raised.value.status, raised.value.detail) == (409, detail)


def test_a_problem_becomes_an_api_error_with_its_field_errors() -> None:
    response = problem(
        422,
        "Invalid job spec",
        "the spec fails validation",
        errors=[
            {"loc": ["task", "resources", "cpu"], "msg": "must be >= 0"},
            {"loc": "count", "msg": "too big"},
        ],
    )
    with pytest.raises(TetherAPIError) as caught:
        client(Recorder(response)).submit_job("x: 1", YAML)
    error = caught.value
    assert (error.status, error.title, error.detail) == (
        422,
        "Invalid job spec",
        "the spec fails validation",
    )
    assert error.errors == [
        FieldError("task.resources.cpu", "must be >= 0"),
        FieldError("count", "too big"),
    ]
    assert str(error) == "422 Invalid job spec: the spec fails validation"


def test_a_non_problem_error_is_still_readable() -> None:
    html = httpx.Response(502, text="<html>bad gateway</html>")
    with pytest.raises(TetherAPIError) as caught:
        client(Recorder(html)).region()
    assert (caught.value.status, caught.value.title) == (502, "Bad Gateway")
    assert "bad gateway" in caught.value.detail
    fastapi_default = httpx.Response(404, json={"detail": "Not Found"})
    with pytest.raises(TetherAPIError) as caught:
        client(Recorder(fastapi_default)).get_job("team-a/web")
    assert (caught.value.status, caught.value.title, caught.value.detail) == (
        404,
        "Not Found",
        "Not Found",
    )


def test_an_unreadable_success_body_is_an_api_error() -> None:
    with pytest.raises(TetherAPIError, match="Unexpected response"):
        client(Recorder(httpx.Response(200, text="not json"))).region()
    with pytest.raises(TetherAPIError, match='"jobs" list'):
        client(Recorder(httpx.Response(200, json={"items": []}))).list_jobs()
    with pytest.raises(TetherAPIError, match="TaskView"):
        client(Recorder(httpx.Response(200, json={"tasks": [{"index": "x"}]}))).list_tasks("a/b")


@pytest.mark.parametrize(
    "exc", [httpx.ConnectError("Connection refused"), httpx.ReadTimeout("timed out")]
)
def test_transport_failures_name_the_url_and_scripts_up(exc: httpx.TransportError) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(TetherConnectionError) as caught:
        client(handler).list_machines()
    assert caught.value.url == URL
    assert URL in str(caught.value)
    assert "scripts/up" in str(caught.value)


def test_an_untrusted_certificate_names_the_setting_that_trusts_it() -> None:
    reason = "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(reason)

    with pytest.raises(TetherConnectionError) as caught:
        client(handler).list_machines()
    assert "TETHER_CA_FILE" in str(caught.value)
    assert "scripts/up" not in str(caught.value)


def test_a_bad_handle_fails_before_any_request() -> None:
    recorder = Recorder(httpx.Response(200, json=JOB))
    with pytest.raises(ValueError, match="invalid job handle"):
        client(recorder).get_job("no-slash")
    with pytest.raises(ValueError, match="invalid job handle"):
        client(recorder).list_tasks("a/b/../c")
    assert recorder.requests == []


def test_from_settings_uses_url_token_and_a_trailing_slash_is_dropped() -> None:
    recorder = Recorder(httpx.Response(200, json={"jobs": []}))
    settings = ClientSettings(url="http://other.test:9000/", token="tok")
    with TetherClient.from_settings(settings, transport=httpx.MockTransport(recorder)) as tether:
        tether.list_jobs()
    assert str(recorder.last.url) == "http://other.test:9000/v1/jobs"
    assert recorder.last.headers["Authorization"] == "Bearer tok"


@pytest.mark.parametrize(("status", "ready"), [(200, True), (503, False)])
def test_ready_asks_readyz(status: int, ready: bool) -> None:
    recorder = Recorder(httpx.Response(status, json={"status": "whatever"}))
    assert client(recorder).ready() is ready
    assert recorder.last.url.path == "/readyz"


def test_an_unreachable_frontend_is_not_ready() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert client(refuse).ready() is False


class DropsFirst:
    """A MockTransport handler whose first `drops` requests lose their connection before the
    answer, as when a server closes a kept-alive connection just as it is reused."""

    def __init__(self, response: httpx.Response, drops: int = 1) -> None:
        self.response = response
        self.drops = drops
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) <= self.drops:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return self.response


def test_a_read_is_sent_again_once_when_the_connection_drops() -> None:
    handler = DropsFirst(httpx.Response(200, json={"jobs": []}))
    assert client(handler).list_jobs() == []
    assert len(handler.requests) == 2


def test_a_submission_is_sent_again_with_the_same_idempotency_key() -> None:
    handler = DropsFirst(httpx.Response(201, json=JOB))
    client(handler).submit_job({"name": "web", "count": 2})
    first, second = handler.requests
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]


def test_a_request_that_is_not_idempotent_is_never_sent_again() -> None:
    handler = DropsFirst(httpx.Response(200, json=JOB))
    with pytest.raises(TetherConnectionError, match="Server disconnected"):
        client(handler).scale_job("team-a/web", 3)
    assert len(handler.requests) == 1


def test_a_second_drop_is_reported() -> None:
    handler = DropsFirst(httpx.Response(200, json={"jobs": []}), drops=2)
    with pytest.raises(TetherConnectionError, match="Server disconnected"):
        client(handler).list_jobs()
    assert len(handler.requests) == 2
