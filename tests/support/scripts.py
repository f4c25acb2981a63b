"""Every script under scripts/ and how the suite runs it: its smallest arguments, and the keys of
the JSON line its `--help` promises, so that no benchmark works only on the day it was written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@dataclass(frozen=True)
class SmokeRun:
    """One run of a script with small arguments."""

    script: str
    args: tuple[str, ...]
    """Its arguments; `{out}` stands for a directory for what it writes (plots), which must
    exist afterwards."""
    keys: frozenset[str]
    """Keys of the JSON line (its last line) that its `--help` names."""
    region: bool = False
    """It starts a region: it runs among the end-to-end tests, one region at a time."""
    stopped_by: signal.Signals | None = None
    """Also stopped by this signal once it has started `processes_to_stop` processes, which
    must then all be gone."""
    processes_to_stop: int = 1

    @property
    def id(self) -> str:
        return f"{self.script.removesuffix('.py')}[{' '.join(self.args)}]"

    def command(self, out: Path) -> list[str]:
        return [sys.executable, str(SCRIPTS / self.script), *self.arguments(out)]

    def arguments(self, out: Path) -> list[str]:
        return [arg.replace("{out}", str(out)) for arg in self.args]

    def outputs(self, out: Path) -> list[Path]:
        """The files it is told to write."""
        return [Path(arg) for arg in self.arguments(out) if arg.startswith(str(out))]


def _keys(*names: str) -> frozenset[str]:
    return frozenset(names)


STORE_KEYS = _keys("backend", "put_per_s", "txn_keys_per_s", "watch_events_per_s")

SMOKE_RUNS: tuple[SmokeRun, ...] = (
    SmokeRun(
        "bench_store.py",
        ("--backend", "sql", "--puts", "200", "--txns", "8", "--watch-events", "200"),
        STORE_KEYS,
    ),
    SmokeRun(
        "bench_store.py",
        ("--backend", "etcd", "--puts", "200", "--txns", "8", "--watch-events", "200"),
        STORE_KEYS | _keys("etcd_cpu_us_per_put", "etcd_cpu_us_per_txn_key"),
    ),
    SmokeRun(
        "bench_allocator_decisions.py",
        ("--machines", "2000", "--fill", "0.3", "--large-job", "100"),
        _keys(
            "machines",
            "build_s",
            "rss_mib",
            "jobs",
            "jobs_fully_placed",
            "tasks_placed",
            "fill",
            "fill_stalled",
            "decisions_per_s",
            "p50_ms",
            "p99_ms",
            "large_job_tasks",
            "large_job_s",
            "unplaced_tasks",
            "unplaced_reasons",
        ),
    ),
    SmokeRun(
        "bench_watches.py",
        ("--watches", "50", "--seconds", "1"),
        _keys("idle_cores", "established_s", "delivered_s", "setup_cpu_s", "peak_rss_mib"),
    ),
    SmokeRun(
        "bench_queue.py",
        ("--queued", "50", "--running", "5", "--passes", "5", "--reads", "3"),
        _keys(
            "admission_decision_p50_ms",
            "admission_decision_p99_ms",
            "get_queue_p50_ms",
            "get_queue_p99_ms",
            "get_queue_bytes",
            "get_whole_queue_p50_ms",
            "get_whole_queue_p99_ms",
            "get_whole_queue_bytes",
        ),
    ),
    SmokeRun(
        "sim_contention.py",
        (
            *("--machines", "4", "--days", "0.2", "--warmup-days", "0.05"),
            *("--deep-queue", "100", "--plot", "{out}/shares.png"),
        ),
        _keys(
            "utilization",
            "jain_index",
            "max_share_error",
            "deadline_miss_rate",
            "fifo_deadline_miss_rate",
            "preemptions",
            "placement_checks",
            "refused_by_placement",
            "refused_by_rule",
            "placement_check_p99_ms",
            "sim_decision_p99_ms",
            "over_quota_passes",
            "admission_decision_p99_ms",
        ),
    ),
    SmokeRun(
        "harvest_traces.py",
        ("--machines", "6", "--hours", "4", "--out", "{out}/traces"),
        _keys("harvest_machines", "steps", "evictions", "long_interval_share", "out"),
    ),
    SmokeRun(
        "sim_harvest.py",
        (
            *("--machines", "8", "--services", "3", "--hours", "0.05"),
            *("--evictions-per-hour", "20", "--plot", "{out}/harvest.png"),
        ),
        _keys(
            "success_rate_mws",
            "success_rate_spread",
            "success_rate_mws_no_notice",
            "cold_starts_mws",
            "cold_starts_spread",
            "moved_mws",
            "killed_mws_no_notice",
            "shrinks",
            "evictions",
        ),
    ),
    SmokeRun(
        "sim_rebalance.py",
        ("--machines", "48", "--teams", "3", "--rounds", "6", "--plot", "{out}/rebalance.png"),
        _keys(
            "stranded_before",
            "stranded_after",
            "spread_before",
            "spread_after",
            "largest_placeable_before",
            "largest_placeable_after",
            "moves_made",
            "unavailability_violations",
        ),
    ),
    SmokeRun(
        "sim_parsync.py",
        (
            *("--machines", "32", "--replicas", "2", "--teams", "4", "--rate", "5"),
            *("--seconds", "6", "--plot", "{out}/parsync.png"),
        ),
        _keys(
            "conflict_rate_watch",
            "conflict_rate_oneshot",
            "conflict_rate_parsync",
            "mean_staleness_s_watch",
            "mean_staleness_s_oneshot",
            "mean_staleness_s_parsync",
            "fresh_choice_share_parsync",
        ),
    ),
    SmokeRun(
        "sim_gavel.py",
        ("--experiment", "traces"),
        _keys("trace_errors", "makespan_ratio_agnostic_over_aware"),
    ),
    SmokeRun(
        "sim_gavel.py",
        (
            *("--experiment", "continuous", "--quick", "--loads", "1", "--window", "10-20"),
            *("--workload", "single-gpu", "--seeds", "0,1", "--plot-jct", "{out}/jct.png"),
        ),
        _keys("jct_ratio_agnostic_over_aware", "aware_over_gavel"),
    ),
    SmokeRun(
        "sim_gavel.py",
        (
            *("--experiment", "solve", "--solve-jobs", "32", "--cvxpy-max", "32"),
            *("--plot-solve", "{out}/solve.png"),
        ),
        _keys("solve_s"),
    ),
    SmokeRun(
        "bench_region.py",
        ("--tasks", "2", "--agents", "2"),
        _keys(
            "ready_s",
            "job_running_s",
            "task_restart_s",
            "leader_failover_s",
            "machine_down_s",
            "tasks_moved_s",
        ),
        region=True,
        stopped_by=signal.SIGINT,
        processes_to_stop=6,
    ),
    SmokeRun(
        "bench_region.py",
        (
            *("--machines", "20", "--tasks", "40", "--job-tasks", "10", "--max-pending", "20"),
            *("--profile", "{out}/profiles", "--tls"),
        ),
        _keys(
            "machines_up_s",
            "submit_s",
            "submit_to_all_running_s",
            "tasks_running_per_s",
            "store_revisions_per_s",
            "cpu_ms_per_task",
            "peak_rss_mib",
            "cpu_s",
        ),
        region=True,
        stopped_by=signal.SIGTERM,
        processes_to_stop=16,
    ),
    SmokeRun(
        "bench_api.py",
        ("--seconds", "3", "--clients", "2", "--agents", "1"),
        _keys(
            "requests",
            "requests_per_s",
            "p50_ms",
            "p99_ms",
            "errors_5xx",
            "errors_4xx",
            "transport_errors",
            "retried",
            "jobs_checked",
            "state_matches_store",
            "cpu_s",
        ),
        region=True,
    ),
    SmokeRun(
        "bench_api.py",
        ("--reads", "--seconds", "2", "--clients", "2", "--agents", "1", "--jobs", "2"),
        _keys(
            "reads",
            "reads_per_s",
            "read_p50_ms",
            "read_p99_ms",
            "frontend_cpu_ms_per_read",
            "errors_5xx",
            "cpu_s",
        ),
        region=True,
    ),
    SmokeRun(
        "bench_idle.py",
        ("--seconds", "1", "--writes", "3", "--settle-s", "0"),
        _keys(
            "benchmark",
            "store",
            "seconds",
            "idle_cores",
            "cpu_s",
            "writes",
            "watch_latency_p50_ms",
            "watch_latency_p99_ms",
        ),
        region=True,
    ),
    SmokeRun(
        "bench_events.py",
        ("--followers", "3", "--seconds", "1", "--jobs", "1", "--settle-s", "0"),
        _keys(
            "benchmark",
            "store",
            "followers",
            "seconds",
            "frontend_cores_alone",
            "frontend_cores_followed",
            "followers_core_share",
            "delivery_p50_ms",
            "delivery_p99_ms",
        ),
        region=True,
    ),
    SmokeRun(
        "ui_screenshots.py",
        ("--out", "{out}/ui", "--width", "800"),
        _keys("benchmark", "out", "pages", "seconds"),
        region=True,
    ),
    SmokeRun(
        "bench_esl.py",
        ("--machines", "4", "--trials", "1", "--gang-size", "2", "--set-calls", "4"),
        _keys("set_resource_p50_ms", "set_resource_p99_ms", "set_resource_lowering_p50_ms"),
        region=True,
    ),
    SmokeRun(
        "bench_failover.py",
        ("--kills", "1", "--tasks", "2", "--agents", "1"),
        _keys(
            "lease_ttl_s",
            "takeover_p50_s",
            "takeover_max_s",
            "reconciled_p50_s",
            "reconciled_max_s",
            "kills",
            "tasks",
            "tasks_restarted",
            "target_max_s",
            "met",
        ),
        region=True,
    ),
    SmokeRun(
        "bench_preemption.py",
        ("--trials", "1", "--tasks", "1"),
        _keys(
            "preemption_latency_grace_0_p50_s",
            "preemption_latency_grace_0_p99_s",
            "preemption_latency_grace_5_p50_s",
            "preemption_latency_grace_5_p99_s",
            "reclaim_latency_p50_s",
            "reclaim_latency_p99_s",
            "reclaim_latency_max_s",
            "reclaim_target_s",
            "reclaim_met",
            "revisions_replayed",
            "over_quota_revisions",
        ),
        region=True,
    ),
)

RUN_ELSEWHERE: dict[str, tuple[str, frozenset[str]]] = {
    "bench_allocator.py": (
        "tests/integration/allocator/test_bench_allocator.py",
        _keys(
            "machines",
            "allocators",
            "jobs",
            "jobs_fully_placed",
            "tasks_placed",
            "fill",
            "fill_reached",
            "jobs_left",
            "fill_stalled",
            "build_s",
            "rss_mib",
            "job_allocs_per_s",
            "task_placements_per_s",
            "p50_ms",
            "p99_ms",
            "large_job_tasks",
            "large_job_s",
            "conflict_rate",
            "txn_conflict_rate",
            "cache_hit_ratio",
            "unplaced_tasks",
            "unplaced_reasons",
            "overcommitted_machines",
            "quota_violations",
            "tasks_held_twice",
            "store_tasks",
        ),
    ),
    "sim_taskcontrol.py": (
        "tests/e2e/test_sim_taskcontrol.py",
        _keys(
            "tasks_acked_first_batch",
            "shards_one_down_peak",
            "shards_two_down_peak",
            "shards_two_down_outside_failure",
            "update_duration_s",
        ),
    ),
    "soak.py": (
        "tests/e2e/test_soak.py",
        _keys(
            "accepted_jobs_lost",
            "tasks_twice_at_most_once",
            "overcommitted_machines",
            "orphan_keys",
            "stray_processes",
            "errors_5xx_outside_store_faults",
            "tasks_twice_other_s",
            "task_restarts_from_control_plane_faults",
        ),
    ),
}
"""Scripts whose run is a test of its own (with more to assert than the keys): the module that
runs it, and the keys its `--help` promises."""


def help_of(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def unpromised(script: str, keys: frozenset[str]) -> list[str]:
    """The keys among `keys` that the script's `--help` does not name."""
    text = help_of(script)
    return sorted(key for key in keys if key not in text)


def started_under(directory: Path) -> list[int]:
    """Pids of the processes started for a run in `directory`: those whose working directory,
    command line or TMPDIR names it (the scripts run with TMPDIR there, which every process
    they start inherits)."""
    marker = str(directory.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            named = (
                os.readlink(entry / "cwd")
                + (entry / "cmdline").read_bytes().decode(errors="replace")
                + (entry / "environ").read_bytes().decode(errors="replace")
            )
        except OSError:
            continue
        if marker in named:
            found.append(int(entry.name))
    return found


def start(run: SmokeRun, directory: Path, out: Path) -> subprocess.Popen[str]:
    """The script, in `directory` and with TMPDIR there so that what it starts can be found,
    writing its outputs to `out`."""
    return subprocess.Popen(
        run.command(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(directory)},
        cwd=directory,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """Its stdout and stderr once it exits; on a timeout it and its group are killed first."""
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        raise AssertionError(f"timed out after {timeout_s} s:\n{stderr[-3000:]}") from None


def result_of(stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON object on the last line of stdout."""
    lines = stdout.splitlines()
    assert lines, f"no JSON line on stdout:\n{stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert isinstance(result, dict), lines[-1]
    return result


def leftovers(directory: Path, *, timeout_s: float = 30) -> list[str]:
    """What is left of a finished run in `directory` once its processes had `timeout_s` to go:
    each process still running (its command line), and each file or directory it left."""
    deadline = time.monotonic() + timeout_s
    while (pids := started_under(directory)) and time.monotonic() < deadline:
        time.sleep(0.2)
    running = []
    for pid in pids:
        try:
            running.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return running + sorted(str(path) for path in directory.iterdir())


def wait_for_processes(process: subprocess.Popen[str], directory: Path, count: int) -> None:
    """Returns once `count` processes run for the script, which must still run itself."""
    deadline = time.monotonic() + 120
    while len(started_under(directory)) < count:
        assert process.poll() is None, f"exited first with {process.returncode}"
        assert time.monotonic() < deadline, f"fewer than {count} processes after 120 s"
        time.sleep(0.1)


def smoke(run: SmokeRun, tmp_path: Path, *, timeout_s: float) -> dict[str, Any]:
    """Runs `run` to its end: it must exit 0, print the keys its `--help` promises on its last
    line, write the files it is told to and leave nothing behind; returns that line."""
    directory, out = tmp_path / "run", tmp_path / "out"
    directory.mkdir()
    process = start(run, directory, out)
    stdout, stderr = finish(process, timeout_s)
    assert process.returncode == 0, stderr[-3000:]
    result = result_of(stdout, stderr)
    assert sorted(run.keys - result.keys()) == [], result
    for path in run.outputs(out):
        if path.suffix:
            assert path.read_bytes().startswith(b"\x89PNG"), path
        else:  # a directory of flame graphs, capacity traces or screenshots
            graphs, traces = list(path.glob("*.svg")), list(path.glob("*.jsonl"))
            shots = list(path.glob("*.png"))
            assert graphs or traces or shots, f"no flame graph, trace or screenshot in {path}"
            assert all(b"<svg" in graph.read_bytes()[:1000] for graph in graphs), graphs
            assert all(trace.read_bytes().startswith(b'{"at_s"') for trace in traces), traces
            assert all(shot.read_bytes().startswith(b"\x89PNG") for shot in shots), shots
    assert leftovers(directory) == []
    return result


def stop(run: SmokeRun, tmp_path: Path) -> str:
    """Starts `run`, sends it its signal once it has started its processes, and checks that it
    exits, removing everything it started; returns its stderr."""
    assert run.stopped_by is not None
    directory, out = tmp_path / "run", tmp_path / "out"
    directory.mkdir()
    process = start(run, directory, out)
    try:
        wait_for_processes(process, directory, run.processes_to_stop)
    except AssertionError:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    process.send_signal(run.stopped_by)
    _, stderr = finish(process, 120)
    assert process.returncode == 128 + run.stopped_by, stderr[-3000:]
    assert f"{run.stopped_by.name}: stopping" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert leftovers(directory) == []
    return stderr
