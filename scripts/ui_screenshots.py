#!/usr/bin/env python3
"""Screenshots of every page of the dashboard, for docs/ui/: a default region (`tether up`: 4
agents, 2 datacenters) given something to show, then each page in headless Chromium.

The region gets: a service of three tasks that runs, a batch job that waits in the queue (more
than the entitlement's quota is free), a suspended batch job, an ephemeral resource, one machine
drained and planned maintenance on another. A Gavel runner's round is reported as `tether
appsched gavel` reports it (PUT /v1/accelerator-reports), since the region has no GPU machines:
the Accelerators page shows that report.

Writes <out>/overview.png, jobs.png, job.png, entitlements.png, accelerators.png, machines.png
and prints one JSON line: `benchmark`, `out`, `pages` (the files written), `seconds`.

Usage: .venv/bin/python scripts/ui_screenshots.py [--out docs/ui] [--width 1280]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import httpx
from benchkit import log, stop_on_signals

# The region harness and the browser are test tooling (tests/support), shared with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.browser import chromium
from tests.support.harness import LocalRegion, all_running, submit, wait_for
from tether.model import DEFAULT_FENCING_S

PAGES: Final = ("overview", "jobs", "job", "entitlements", "accelerators", "machines")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("docs/ui"), help="where (docs/ui)")
    parser.add_argument("--width", type=int, default=1280, help="the window's width (1280)")
    args = parser.parse_args()
    if args.width < 600:
        parser.error("--width must be at least 600")
    return args


def task(command: str, cpu: int = 100) -> dict[str, Any]:
    return {
        "package": "demo",
        "version": "1.0",
        "command": "/bin/sh",
        "args": ["-c", command],
        "resources": {"cpu": cpu, "memory_mib": 64},
    }


def populate(client: httpx.Client) -> None:
    """Jobs, a queue, a resource, a drained machine, maintenance and a Gavel round."""
    web = submit(client, {"name": "web", "entitlement": "default", "count": 3, "task": task(
        'echo "serving on $TETHER_MACHINE"; exec sleep 3600'
    )})  # fmt: skip
    wait_for(lambda: all_running(client, web, 3), timeout_s=60, what="web running")
    for name, extra in (("train", {"suspended": True}), ("huge", {})):
        spec = {
            "name": name,
            "entitlement": "default",
            "count": 2,
            "kind": "batch",
            "task": task("exec sleep 3600", cpu=7900 if name == "huge" else 100),
            **extra,
        }
        submit(client, spec)
    resource = {"entitlement": "default", "label": "licenses", "capacity": 4, "node_spec": {}}
    answered = client.post("/v1/resources", json=resource)
    answered.raise_for_status()
    drained = client.post("/admin/machines/m04/drain", json={"deadline_s": 600})
    drained.raise_for_status()
    maintenance = {"machines": ["m03"], "duration_s": 3600, "kind": "reboot", "reason": "kernel"}
    client.post("/v1/maintenance", json={**maintenance, "start": _in(7200)}).raise_for_status()
    round_report = {
        "policy": "max_min_fairness_perf",
        "round_s": 360,
        "rounds": 12,
        "accelerators": {"v100": 4, "k80": 8},
        "jobs": [
            {
                "job": "default/resnet",
                "running_on": "v100",
                "allocation": {"v100": 0.75, "k80": 0.25},
                "received": {"v100": 0.72, "k80": 0.28},
            },
            {
                "job": "default/lstm",
                "running_on": "k80",
                "allocation": {"v100": 0.25, "k80": 0.75},
                "received": {"v100": 0.28, "k80": 0.72},
            },
        ],
    }
    client.put("/v1/accelerator-reports/default", json=round_report).raise_for_status()


def _in(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))


def shoot(region: LocalRegion, out: Path, width: int) -> list[str]:
    written = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": 800})
        page.goto(f"{region.url}/ui/login")
        page.fill("#token", region.token)
        page.click("button[type=submit]")
        page.wait_for_url("**/ui/overview")
        for name in PAGES:
            path = "jobs/default/web" if name == "job" else name
            page.goto(f"{region.url}/ui/{path}")
            page.wait_for_load_state("networkidle")
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            written.append(str(target))
            log(f"wrote {target}")
    return written


def main() -> None:
    stop_on_signals()
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tether-ui-") as directory:
        region = LocalRegion(Path(directory) / "tether", timings={}, fencing_s=DEFAULT_FENCING_S)
        try:
            log("starting a default region")
            region.start()
            with region.client() as client:
                log("giving it jobs, a queue, a resource, a drain and maintenance")
                populate(client)
            pages = shoot(region, args.out, args.width)
        finally:
            region.cleanup()
    result = {
        "benchmark": "ui-screenshots",
        "out": str(args.out),
        "pages": pages,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
