"""The local region's plan: topology of the agents, the processes, the default entitlement."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tether.model import Resources
from tether.region.plan import (
    ALLOCATORS,
    DATACENTERS,
    SHARDS,
    RegionOptions,
    agent_placements,
    default_entitlement,
    region_processes,
)
from tether.region.supervisor import STOP_PHASES


def test_four_agents_cover_every_msb_of_both_datacenters() -> None:
    placements = agent_placements(4)
    assert {(p.dc, p.msb) for p in placements} == {
        ("dc1", "msb1"),
        ("dc2", "msb1"),
        ("dc1", "msb2"),
        ("dc2", "msb2"),
    }
    assert len({p.machine_id for p in placements}) == 4


def test_more_agents_fill_racks_evenly() -> None:
    placements = agent_placements(16)
    per_rack = Counter((p.dc, p.msb, p.rack) for p in placements)
    assert len(per_rack) == 8
    assert set(per_rack.values()) == {2}


def test_processes_have_unique_names_and_the_planned_roles(tmp_path: Path) -> None:
    options = RegionOptions(state_dir=tmp_path, store_url="sqlite:///x.db", agents=3)
    specs = region_processes(options)
    assert len({s.name for s in specs}) == len(specs)
    roles = Counter(s.role for s in specs)
    assert roles == {
        "allocator": ALLOCATORS,
        "broker": len(DATACENTERS),
        "health": 1,
        "rebalancer": 1,
        "scheduler": 2 * len(SHARDS),
        "agent": 3,
        "registry": 1,
        "frontend": 1,
    }
    assert specs[-1].role == "frontend"
    agent = next(s for s in specs if s.role == "agent")
    assert agent.argv()[1:4] == ["-m", "tether.cli.services", "agent"]
    assert str(tmp_path / "agents" / "m01") in agent.args


def test_default_entitlement_quota_is_the_agents_total_capacity(tmp_path: Path) -> None:
    options = RegionOptions(
        state_dir=tmp_path,
        store_url="sqlite:///x.db",
        agents=3,
        agent_capacity=Resources(cpu=1000, memory_mib=512, disk_gib=5),
    )
    entitlement = default_entitlement(options)
    assert entitlement.quota.resources == Resources(cpu=3000, memory_mib=1536, disk_gib=15)
    assert entitlement.members == ["admin"]


def test_every_process_but_the_frontends_serves_metrics_on_a_port_of_its_own(
    tmp_path: Path,
) -> None:
    # Enough agents that ports drawn at random, each unaware of the others, would repeat.
    options = RegionOptions(state_dir=tmp_path, store_url="sqlite:///x.db", agents=600)
    specs = region_processes(options)
    served = [spec for spec in specs if spec.role != "frontend"]
    ports = {spec.metrics_port for spec in served}
    assert len(ports) == len(served)
    assert 0 not in ports
    assert not ports & {options.registry_port, *options.frontend_ports}
    for spec in served:
        assert spec.argv()[-2:] == ["--metrics-port", str(spec.metrics_port)]
    for frontend in (spec for spec in specs if spec.role == "frontend"):
        assert frontend.metrics_port == 0
        assert "--metrics-port" not in frontend.argv()


def test_every_planned_role_stops_in_some_phase(tmp_path: Path) -> None:
    options = RegionOptions(state_dir=tmp_path, store_url="sqlite:///x.db", agents=1)
    roles = {spec.role for spec in region_processes(options)}
    phases = [set(phase) for phase in STOP_PHASES]
    assert roles == set().union(*phases), "a role outside every phase is never stopped"
    assert sum(len(phase) for phase in phases) == len(roles), "a role in two phases"
