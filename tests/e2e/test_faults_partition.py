"""A network partition: one agent runs in its own network namespace and is cut off from the
region, then joins it again.

The region (`tether up` with three agents) uses an etcd server that also listens on the host's
end of a veth pair; the fourth agent runs in a namespace holding the other end, and reaches the
store only through it. Taking the link down inside the namespace partitions that one machine.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.faults import TwiceSampler, dead_services
from tests.support.harness import (
    LocalRegion,
    all_running,
    machines_by_id,
    sleeper_job,
    submit,
    wait_for,
)
from tests.support.netns import Namespace, start_agent_in
from tether.region.supervisor import process_alive
from tether.store.etcd_server import EtcdServer

pytestmark = pytest.mark.timeout(180)

AGENTS = 3
"""Agents `tether up` runs; the partitioned one is the next machine of the same plan."""


@pytest.fixture(scope="module")
def namespace() -> Iterator[Namespace]:
    created = Namespace.unique()
    try:
        created.create()
        yield created
    finally:
        created.delete()


@pytest.fixture(scope="module")
def etcd(namespace: Namespace) -> Iterator[EtcdServer]:
    with EtcdServer(on_tmpfs=True, extra_client_hosts=[namespace.host_ip]) as server:
        yield server


@dataclass
class Partitioned:
    """The region, and the agent of `machine` running inside the namespace."""

    region: LocalRegion
    client: httpx.Client
    namespace: Namespace
    machine: str
    agent: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def partitioned(
    namespace: Namespace, etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Partitioned]:
    region = LocalRegion(
        tmp_path_factory.mktemp("partition") / "tether",
        store_args=["--store", etcd.url],
        agents=AGENTS,
    )
    agent: subprocess.Popen[bytes] | None = None
    try:
        region.start()
        agent, machine = start_agent_in(namespace, region, etcd.url_on(namespace.host_ip))
        client = region.client()
        wait_for(
            lambda: machines_by_id(client).get(machine, {}).get("state") == "up",
            timeout_s=60,
            what=f"the agent of {machine} in namespace {namespace.name} to join",
        )
        yield Partitioned(region, client, namespace, machine, agent)
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
        # Also kills the namespace agent's tasks: its work dir is under the region's.
        region.cleanup()


def running_off(
    client: httpx.Client, handle: str, count: int, machine: str
) -> list[dict[str, Any]] | None:
    """The job's tasks once all `count` run, none of them on `machine`."""
    tasks = all_running(client, handle, count)
    return tasks if tasks and all(t["machine"] != machine for t in tasks) else None


def test_cut_off_machine_is_replaced_and_its_agent_kills_stale_tasks_on_return(
    partitioned: Partitioned,
) -> None:
    client, machine = partitioned.client, partitioned.machine
    services = partitioned.region.service_pids()
    # Four MSBs, four tasks: the spread puts one on the partitioned machine.
    handle = submit(client, sleeper_job("spread", 4))
    before = wait_for(lambda: all_running(client, handle, 4), timeout_s=60, what="4 running")
    isolated = next(t for t in before if t["machine"] == machine)
    others = {t["index"]: t["pid"] for t in before if t["machine"] != machine}

    partitioned.namespace.cut()
    wait_for(
        lambda: machines_by_id(client)[machine]["state"] == "down",
        timeout_s=20,
        what=f"machine {machine} to be down",
    )

    during = wait_for(
        lambda: running_off(client, handle, 4, machine),
        timeout_s=30,
        what=f"the task on {machine} to run elsewhere",
    )
    moved = next(t for t in during if t["index"] == isolated["index"])
    assert moved["attempt"] > isolated["attempt"]
    assert {t["index"]: t["pid"] for t in during if t["index"] in others} == others
    # Cut off, the agent cannot know that its task was replaced: it runs on until the link is
    # back (docs/faults.md).
    assert process_alive(isolated["pid"])

    partitioned.namespace.heal()
    wait_for(
        lambda: not process_alive(isolated["pid"]),
        timeout_s=30,
        what="the returning agent to kill its stale task",
    )
    wait_for(
        lambda: machines_by_id(client)[machine]["state"] == "up",
        timeout_s=30,
        what=f"machine {machine} to be up again",
    )
    after = all_running(client, handle, 4)
    assert after is not None
    assert {t["index"]: t["pid"] for t in after} == {t["index"]: t["pid"] for t in during}
    assert partitioned.agent.poll() is None, "the partitioned agent exited"
    assert dead_services(partitioned.region, services) == []


def test_rejoined_machine_takes_new_tasks(partitioned: Partitioned) -> None:
    client, machine = partitioned.client, partitioned.machine
    # Grown by four, the job spreads its new tasks over the MSBs again: one lands on the
    # machine that came back, whose agent runs it.
    assert client.post("/v1/jobs/default/spread/scale", json={"count": 8}).status_code == 200
    tasks = wait_for(
        lambda: all_running(client, "default/spread", 8), timeout_s=60, what="8 running"
    )
    on_machine = [t for t in tasks if t["machine"] == machine]
    assert on_machine
    environ = Path(f"/proc/{on_machine[0]['pid']}/environ").read_bytes()
    assert f"TETHER_MACHINE={machine}".encode() in environ.split(b"\0")


def test_an_at_most_once_task_is_killed_before_it_runs_elsewhere(partitioned: Partitioned) -> None:
    client, machine = partitioned.client, partitioned.machine
    region = partitioned.region
    # The ordinary job of the tests above has a task on the machine too.
    ordinary = next(
        t for t in all_running(client, "default/spread", 8) or [] if t["machine"] == machine
    )
    handle = submit(client, sleeper_job("once", 4) | {"at_most_once": True})
    before = wait_for(lambda: all_running(client, handle, 4), timeout_s=60, what="4 running")
    isolated = next(t for t in before if t["machine"] == machine)
    sampler = TwiceSampler(region.state_dir)
    sampler.start()
    try:
        partitioned.namespace.cut()

        # The machine goes down after the lease TTL and the grace; the task runs elsewhere only
        # after the fencing period and the margin on top.
        during = wait_for(
            lambda: running_off(client, handle, 4, machine),
            timeout_s=60,
            what=f"the task on {machine} to run elsewhere",
        )
        moved = next(t for t in during if t["index"] == isolated["index"])
        assert moved["attempt"] > isolated["attempt"]
        # Its agent, still cut off, has killed it; the ordinary task on the machine runs on.
        assert not process_alive(isolated["pid"])
        assert process_alive(ordinary["pid"])

        partitioned.namespace.heal()
        wait_for(
            lambda: machines_by_id(client)[machine]["state"] == "up",
            timeout_s=30,
            what=f"machine {machine} to be up again",
        )
        wait_for(
            lambda: not process_alive(ordinary["pid"]),
            timeout_s=30,
            what="the returning agent to kill its stale ordinary task",
        )
    finally:
        sampler.stop()
    assert sampler.samples > 50
    once = {task_id: most for task_id, most in sampler.most.items() if task_id.startswith(handle)}
    assert once == {f"{handle}/{index}": 1 for index in range(4)}
    # The ordinary task ran twice while the partition lasted, as docs/faults.md says.
    assert sampler.most[f"default/spread/{ordinary['index']}"] == 2
