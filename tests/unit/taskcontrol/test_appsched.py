"""The reference controllers' decisions, from TaskControlRequests built by hand."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.store.etcd_server import free_port
from tether.taskcontrol.appsched.base import Situation
from tether.taskcontrol.appsched.gang import GangController, plan_gang
from tether.taskcontrol.appsched.replicas import (
    ReplicasController,
    ShardMap,
    ShardMapEndpoint,
    ShardMapError,
    plan_replicas,
    read_shard_map,
)
from tether.taskcontrol.appsched.rolling import MaxUnavailable, RollingController, plan_rolling

JOB = "ml/train"


def op(id: str, *tasks: int, created_s: int = 0) -> pb.TaskOperation:
    operation = pb.TaskOperation(
        id=id,
        kind=pb.OPERATION_KIND_UPDATE,
        tasks=[pb.TaskRef(job_handle=JOB, index=index) for index in tasks],
        state=pb.OPERATION_STATE_PENDING_APPROVAL,
    )
    operation.created_at.seconds = created_s
    return operation


def done(id: str, *tasks: int) -> pb.TaskOperation:
    operation = op(id, *tasks)
    operation.state = pb.OPERATION_STATE_DONE
    return operation


def request(
    count: int,
    pending: Sequence[pb.TaskOperation] = (),
    *,
    completed: Sequence[pb.TaskOperation] = (),
    unhealthy: Sequence[int] = (),
) -> pb.TaskControlRequest:
    return pb.TaskControlRequest(
        job_handle=JOB,
        sequence_number=1,
        pending_operations=pending,
        completed_operations=completed,
        all_unhealthy_tasks=[
            pb.UnhealthyTask(task=pb.TaskRef(job_handle=JOB, index=index)) for index in unhealthy
        ],
        task_count=count,
    )


def one_per_task(count: int) -> list[pb.TaskOperation]:
    return [op(f"u{index}", index, created_s=index) for index in range(count)]


def shard_map(shards: dict[str, list[int]]) -> ShardMap:
    return ShardMap.parse(json.dumps({"shards": shards}).encode())


# --- rolling ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "budget"),
    [
        ("10%", 30, 3),
        ("10%", 39, 3),  # rounded down
        ("10%", 5, 1),  # but at least one task
        ("100%", 7, 7),
        ("3", 30, 3),
        ("3", 2, 3),
        (" 25% ", 8, 2),
    ],
)
def test_max_unavailable_budget(text: str, count: int, budget: int) -> None:
    assert MaxUnavailable.parse(text).budget(count) == budget


@pytest.mark.parametrize("text", ["", "abc", "0", "0%", "101%", "-1", "1.5%", "10 %", "%"])
def test_max_unavailable_refuses_what_is_no_count_or_percentage(text: str) -> None:
    with pytest.raises(ValueError, match=r"percentage|at least 1"):
        MaxUnavailable.parse(text)


def test_rolling_acks_oldest_first_within_a_percentage() -> None:
    # Listed newest first: the controller goes by created_at.
    pending = list(reversed(one_per_task(30)))
    decision = plan_rolling(Situation.of(request(30, pending)), MaxUnavailable.parse("10%"))
    assert decision.acks == ["u0", "u1", "u2"]
    assert "at most 3 may be down" in decision.why_others_wait


def test_rolling_counts_unhealthy_tasks_against_the_budget() -> None:
    situation = Situation.of(request(10, one_per_task(7), unhealthy=[7]))
    assert plan_rolling(situation, MaxUnavailable.parse("2")).acks == ["u0"]
    assert plan_rolling(situation, MaxUnavailable.parse("1")).acks == []


def test_rolling_acks_an_operation_on_a_task_that_is_down_anyway() -> None:
    # The budget is used up by task 7 itself; its own operation, the youngest, costs nothing.
    pending = [*one_per_task(3), op("u7", 7, created_s=9)]
    situation = Situation.of(request(10, pending, unhealthy=[7]))
    assert plan_rolling(situation, MaxUnavailable.parse("1")).acks == ["u7"]


def test_rolling_does_not_let_younger_operations_overtake_one_that_does_not_fit() -> None:
    pending = [op("big", 0, 1, 2, created_s=1), op("small", 3, created_s=2)]
    decision = plan_rolling(Situation.of(request(10, pending)), MaxUnavailable.parse("2"))
    assert decision.acks == []
    assert "big would take 3 more" in decision.why_others_wait


async def test_rolling_counts_acks_in_flight_until_they_complete() -> None:
    controller = RollingController(MaxUnavailable.parse("1"))
    u0, u1 = op("u0", 0, created_s=0), op("u1", 1, created_s=1)
    assert await controller.decide(request(4, [u0, u1])) == ["u0"]
    # u0 is approved but not executed yet: neither pending nor completed, and still down.
    assert await controller.decide(request(4, [u1])) == []
    assert await controller.decide(request(4, [u1])) == []
    # Executed: its task is unhealthy until it runs again, and that counts now.
    assert await controller.decide(request(4, [u1], completed=[done("u0", 0)], unhealthy=[0])) == []
    assert await controller.decide(request(4, [u1])) == ["u1"]


async def test_rolling_forgets_an_ack_whose_operation_is_pending_again() -> None:
    controller = RollingController(MaxUnavailable.parse("1"))
    u0, u1 = op("u0", 0, created_s=0), op("u1", 1, created_s=1)
    assert await controller.decide(request(4, [u1])) == ["u1"]
    # Tether never got the answer: u1 is pending again, so task 1 is not down, and the older u0
    # goes first.
    assert await controller.decide(request(4, [u0, u1])) == ["u0"]


async def test_acks_in_flight_are_kept_per_job() -> None:
    controller = RollingController(MaxUnavailable.parse("1"))
    assert await controller.decide(request(4, [op("u0", 0)])) == ["u0"]
    other = request(4, [op("v0", 0)])
    other.job_handle = "ml/other"
    assert await controller.decide(other) == ["v0"]


# --- replicas --------------------------------------------------------------------------------

TWO_SHARDS = {"s1": [0, 1, 2], "s2": [2, 3, 4]}


def test_replicas_never_takes_a_second_replica_of_a_shard_down() -> None:
    decision = plan_replicas(
        Situation.of(request(5, one_per_task(5))), shard_map(TWO_SHARDS), max_down=1
    )
    assert decision.acks == ["u0", "u3"]
    assert "more than 1 replica(s) down" in decision.why_others_wait


def test_replicas_counts_unhealthy_tasks() -> None:
    situation = Situation.of(request(5, one_per_task(5), unhealthy=[1]))
    # Task 1 is down anyway, so its own operation costs nothing; shard s1 has no slack left.
    assert plan_replicas(situation, shard_map(TWO_SHARDS), max_down=1).acks == ["u1", "u3"]


def test_replicas_allows_more_down_per_shard_when_asked() -> None:
    situation = Situation.of(request(5, one_per_task(5)))
    assert plan_replicas(situation, shard_map(TWO_SHARDS), max_down=2).acks == [
        "u0",
        "u1",
        "u3",
        "u4",
    ]


def test_replicas_counts_a_task_holding_two_replicas_of_a_shard_twice() -> None:
    situation = Situation.of(request(3, one_per_task(3)))
    decision = plan_replicas(situation, shard_map({"s": [0, 0, 1, 2]}), max_down=1)
    assert decision.acks == ["u1"]


def test_replicas_prefers_operations_on_shards_with_no_replica_down() -> None:
    # Task 0 is down, so shard a is degraded. The oldest operation (task 1) would take a's
    # last slack; the younger ones on tasks 2 and 3 touch only shard b, which is whole.
    shards = {"a": [0, 1, 7], "b": [1, 2, 3, 8]}
    pending = [op("x", 1, created_s=0), op("y1", 2, created_s=1), op("y2", 3, created_s=2)]
    situation = Situation.of(request(9, pending, unhealthy=[0]))
    assert plan_replicas(situation, shard_map(shards), max_down=2).acks == ["y1", "y2"]


def test_replicas_acks_operations_on_tasks_in_no_shard() -> None:
    situation = Situation.of(request(6, one_per_task(6)))
    assert plan_replicas(situation, shard_map({"s": [0, 1]}), max_down=1).acks == [
        "u0",
        "u2",
        "u3",
        "u4",
        "u5",
    ]


def test_replicas_without_a_map_acks_nothing() -> None:
    decision = plan_replicas(Situation.of(request(2, one_per_task(2))), None, max_down=1)
    assert decision.acks == []
    assert "no shard map" in decision.why_others_wait


async def test_replicas_counts_acks_in_flight() -> None:
    controller = ReplicasController(shard_map(TWO_SHARDS), max_down=1)
    assert await controller.decide(request(5, one_per_task(5))) == ["u0", "u3"]
    waiting = [o for o in one_per_task(5) if o.id not in ("u0", "u3")]
    assert await controller.decide(request(5, waiting)) == []
    completed = [done("u0", 0), done("u3", 3)]
    assert await controller.decide(request(5, waiting, completed=completed)) == ["u1", "u4"]


@dataclass(frozen=True)
class Case:
    shards: dict[str, list[int]]
    task_count: int
    unhealthy: frozenset[int]
    in_flight: frozenset[int]
    pending: list[frozenset[int]]
    max_down: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    task_count = draw(st.integers(1, 12))
    task = st.integers(0, task_count - 1)
    shards = draw(
        st.dictionaries(
            st.text("abcdef", min_size=1, max_size=3),
            st.lists(task, min_size=1, max_size=4),
            min_size=1,
            max_size=8,
        )
    )
    return Case(
        shards=shards,
        task_count=task_count,
        unhealthy=draw(st.frozensets(task, max_size=3)),
        in_flight=draw(st.frozensets(task, max_size=2)),
        pending=draw(st.lists(st.frozensets(task, min_size=1, max_size=3), max_size=12)),
        max_down=draw(st.integers(1, 3)),
    )


def replicas_down(shards: dict[str, list[int]], down: set[int]) -> dict[str, int]:
    return {name: sum(task in down for task in tasks) for name, tasks in shards.items()}


@settings(max_examples=400, deadline=None)
@given(cases())
def test_replicas_never_leaves_a_shard_over_its_limit(case: Case) -> None:
    pending = [op(f"op{i}", *sorted(tasks), created_s=i) for i, tasks in enumerate(case.pending)]
    situation = Situation.of(
        request(case.task_count, pending, unhealthy=sorted(case.unhealthy)), case.in_flight
    )
    acks = set(plan_replicas(situation, shard_map(case.shards), case.max_down).acks)

    down_before = set(case.unhealthy | case.in_flight)
    down_after = down_before.union(
        *(tasks for i, tasks in enumerate(case.pending) if f"op{i}" in acks)
    )
    before = replicas_down(case.shards, down_before)
    after = replicas_down(case.shards, down_after)
    for name in case.shards:
        # A shard already over the limit (through failures) may get no worse.
        assert after[name] <= max(case.max_down, before[name])
        if before[name] >= case.max_down:
            assert after[name] == before[name]
    # And the batch is as large as greedy gets: every operation left out would break a shard.
    for i, tasks in enumerate(case.pending):
        if f"op{i}" not in acks:
            more = replicas_down(case.shards, down_after | tasks)
            assert any(more[name] > max(case.max_down, after[name]) for name in case.shards)


def test_replicas_decides_for_a_service_of_the_simulations_size() -> None:
    # How fast it decides is scripts/sim_taskcontrol.py's business; here, that it decides right.
    rng = random.Random(7)
    shards = {f"shard-{i}": rng.sample(range(1000), 3) for i in range(15_000)}
    unhealthy = set(rng.sample(range(1000), 10))
    situation = request(1000, one_per_task(1000), unhealthy=sorted(unhealthy))
    controller = ReplicasController(shard_map(shards), max_down=1)
    acks = asyncio.run(controller.decide(situation))
    assert acks
    before = replicas_down(shards, unhealthy)
    after = replicas_down(shards, unhealthy | {int(ack.removeprefix("u")) for ack in acks})
    assert all(after[name] <= max(1, before[name]) for name in shards)


# --- the shard map ---------------------------------------------------------------------------


def test_read_shard_map_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "shards.json"
    path.write_text(json.dumps({"shards": {"a": [0, 1], "b": [1, 2]}}))
    loaded = read_shard_map(path)
    assert loaded.shard_names == ("a", "b")
    assert dict(loaded.replicas_by_task) == {0: ((0, 1),), 1: ((0, 1), (1, 1)), 2: ((1, 1),)}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "expected"),
        (b'{"shards": []}', "expected"),
        (b'{"shards": {}}', "at least one shard"),
        (b'{"shard": {"a": [0]}}', "expected"),
        (b'{"shards": {"a": 3}}', "shard 'a'"),
        (b'{"shards": {"a": [0, "1"]}}', "shard 'a'"),
        (b'{"shards": {"a": [-1]}}', "shard 'a'"),
        (b'{"shards": {"a": [true]}}', "shard 'a'"),
        (b'{"shards": {"a": [1.0]}}', "shard 'a'"),
    ],
)
def test_bad_shard_maps_are_refused(tmp_path: Path, document: bytes, message: str) -> None:
    path = tmp_path / "shards.json"
    path.write_bytes(document)
    with pytest.raises(ShardMapError, match=message) as refused:
        read_shard_map(path)
    assert str(path) in str(refused.value)


def test_a_missing_shard_map_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ShardMapError, match=r"cannot read the shard map .*missing\.json"):
        read_shard_map(tmp_path / "missing.json")


@dataclass
class Served:
    """What the application's shard map endpoint answers now."""

    status: int = 200
    body: bytes = b""
    requests: int = 0


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Served]]:
    """A real HTTP server on loopback serving `Served`, in a thread."""
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests += 1
            self.send_response(served.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            self.wfile.write(served.body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest's output to the test's own

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/shards", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def shards_json(shards: dict[str, list[int]]) -> bytes:
    return json.dumps({"shards": shards}).encode()


async def test_the_endpoint_map_is_read_on_every_call(endpoint: tuple[str, Served]) -> None:
    url, served = endpoint
    served.body = shards_json({"s": [0, 1]})
    controller = ReplicasController(ShardMapEndpoint(url), max_down=1)
    try:
        assert await controller.decide(request(2, one_per_task(2))) == ["u0"]
        # The application moved the replica off task 1; both may go now.
        served.body = shards_json({"s": [0, 2]})
        later = request(2, [op("u1", 1)], completed=[done("u0", 0)])
        assert await controller.decide(later) == ["u1"]
        assert served.requests == 2
    finally:
        await controller.stop()


async def test_a_failing_endpoint_keeps_the_last_map(endpoint: tuple[str, Served]) -> None:
    url, served = endpoint
    source = ShardMapEndpoint(url)
    try:
        served.body = shards_json({"s": [0, 1]})
        first = await source.fetch()
        assert first is not None
        for status, body in ((500, b"oops"), (200, b"{not json"), (200, b'{"shards": 1}')):
            served.status, served.body = status, body
            assert await source.fetch() is first
    finally:
        await source.close()


async def test_without_any_map_from_the_endpoint_nothing_is_acked(
    endpoint: tuple[str, Served],
) -> None:
    url, served = endpoint
    served.status, served.body = 503, b""
    controller = ReplicasController(ShardMapEndpoint(url), max_down=1)
    try:
        assert await controller.decide(request(2, one_per_task(2))) == []
    finally:
        await controller.stop()


async def test_an_unreachable_endpoint_yields_no_map() -> None:
    source = ShardMapEndpoint(f"http://127.0.0.1:{free_port()}/shards")
    try:
        assert await source.fetch() is None
    finally:
        await source.close()


# --- gang ------------------------------------------------------------------------------------


def test_gang_acks_everything_once_every_task_has_an_operation() -> None:
    situation = Situation.of(request(3, one_per_task(3)))
    assert plan_gang(situation).acks == ["u0", "u1", "u2"]


def test_gang_acks_nothing_while_a_task_has_no_operation() -> None:
    decision = plan_gang(Situation.of(request(3, one_per_task(3)[:2], unhealthy=[2])))
    assert decision.acks == []
    assert decision.why_others_wait == "pending operations cover 2 of 3 tasks (none yet for task 2)"


def test_gang_accepts_operations_that_cover_several_tasks() -> None:
    situation = Situation.of(request(4, [op("a", 0, 1), op("b", 2, 3, created_s=1)]))
    assert plan_gang(situation).acks == ["a", "b"]


def test_gang_lets_the_tasks_a_shrink_removes_go_at_once() -> None:
    stops = [op("s3", 3), op("s4", 4)]
    for stop in stops:
        stop.kind = pb.OPERATION_KIND_STOP
    # The three that stay have no operation: only the leaving ones are acknowledged.
    assert plan_gang(Situation.of(request(3, stops))).acks == ["s3", "s4"]
    assert plan_gang(Situation.of(request(3, [*stops, *one_per_task(2)]))).acks == ["s3", "s4"]
    everyone = plan_gang(Situation.of(request(3, [*stops, *one_per_task(3)]))).acks
    assert sorted(everyone) == ["s3", "s4", "u0", "u1", "u2"]


async def test_gang_acks_again_when_its_answer_was_lost() -> None:
    controller = GangController()
    assert await controller.decide(request(2, one_per_task(2))) == ["u0", "u1"]
    assert await controller.decide(request(2, one_per_task(2))) == ["u0", "u1"]


async def test_gang_waits_for_its_acks_in_flight() -> None:
    controller = GangController()
    assert await controller.decide(request(2, one_per_task(2))) == ["u0", "u1"]
    # A new round of operations while the first is not reported done yet.
    again = [op("v0", 0), op("v1", 1)]
    assert await controller.decide(request(2, again)) == []
    completed = [done("u0", 0), done("u1", 1)]
    assert await controller.decide(request(2, again, completed=completed)) == ["v0", "v1"]
