"""The metrics' names follow Prometheus' conventions; outcomes and the exposition format."""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import Counter, Histogram

from tether import metrics, metrics_server

SUBSYSTEMS = {
    "store",
    "frontend",
    "allocator",
    "scheduler",
    "agent",
    "health",
    "broker",
    "rebalancer",
}


def tether_metrics() -> list[Counter | Histogram]:
    return [m for m in vars(metrics).values() if isinstance(m, Counter | Histogram)]


def test_every_metric_is_named_tether_subsystem_what_unit() -> None:
    found = tether_metrics()
    assert len(found) >= 10
    for metric in found:
        [family] = metric.describe()
        assert family.documentation, family.name
        prefix, subsystem, *_ = family.name.split("_")
        assert prefix == "tether", family.name
        assert subsystem in SUBSYSTEMS, family.name
        if isinstance(metric, Histogram):
            assert family.name.endswith("_seconds"), family.name
        else:
            # prometheus_client keeps a counter's family name without the `_total` it exposes.
            assert family.type == "counter", family.name
            assert not family.name.endswith(("_seconds", "_total")), family.name


def test_a_counter_is_exposed_with_total() -> None:
    metrics.AGENT_TASKS_STARTED.inc(0)
    body, _ = metrics.exposition("")
    assert b"\ntether_agent_tasks_started_total " in body


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "details", None)


class Wrapped(Exception):
    """Like ControllerFailed: an error raised from the gRPC call's error."""


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, "timeout"),
        (grpc.StatusCode.UNAVAILABLE, "failed"),
        (grpc.StatusCode.INTERNAL, "failed"),
    ],
)
def test_call_outcome_tells_a_deadline_from_other_failures(
    code: grpc.StatusCode, outcome: str
) -> None:
    error = rpc_error(code)
    assert metrics.call_outcome(error) == outcome
    wrapped = Wrapped("controller failed")
    wrapped.__cause__ = error  # what `raise Wrapped(...) from error` sets
    assert metrics.call_outcome(wrapped) == outcome


def test_call_outcome_of_an_error_without_a_grpc_cause_is_failed() -> None:
    assert metrics.call_outcome(ValueError("bad answer")) == "failed"


def test_exposition_is_prometheus_text_unless_openmetrics_is_asked_for() -> None:
    body, content_type = metrics.exposition("")
    assert content_type.startswith("text/plain")
    assert b"# TYPE tether_store_request_duration_seconds histogram" in body
    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_the_metrics_host_comes_from_tether_metrics_host(monkeypatch: pytest.MonkeyPatch) -> None:
    assert metrics_server.MetricsSettings().host == "127.0.0.1"
    monkeypatch.setenv("TETHER_METRICS_HOST", "0.0.0.0")
    assert metrics_server.MetricsSettings().host == "0.0.0.0"
