"""`service.run`, the body of every service process: it tunes the garbage collector, serves
until SIGTERM, and ends the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tether.service import GC_THRESHOLDS

SERVICE = textwrap.dedent(
    """
    import gc, os, signal, sys
    from pathlib import Path
    from tether.service import Service, run

    class Reporting(Service):
        name = "reporting"

        async def start(self) -> None:
            Path(sys.argv[1]).write_text(repr(gc.get_threshold()))
            os.kill(os.getpid(), signal.SIGTERM)

        async def stop(self) -> None:
            Path(sys.argv[1]).write_text(Path(sys.argv[1]).read_text() + " stopped")

    run(Reporting())
    """
)


def test_a_service_runs_with_the_tuned_collector_until_sigterm(tmp_path: Path) -> None:
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-c", SERVICE, str(report)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert report.read_text() == f"{GC_THRESHOLDS!r} stopped"
