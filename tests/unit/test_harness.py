"""What a failed end-to-end test reports of its region's logs (`LocalRegion.log_digest`)."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness import LocalRegion
from tests.support.region import write_region_file


def test_the_digest_shows_each_logs_warnings_errors_and_tracebacks_newest_last(
    tmp_path: Path,
) -> None:
    region = LocalRegion(tmp_path / "tether", port=18080)
    state = write_region_file(region.state_dir)
    state.logs.mkdir()
    (state.logs / "scheduler-shard-0-a.log").write_text(
        "INFO leading shard-0\n"
        "WARNING admission: deposed: the ledger moved\n"
        "Traceback (most recent call last):\n"
        "INFO placed 4 tasks\n"
    )
    (state.logs / "frontend.log").write_text("INFO GET /v1/jobs 200\n")
    region.output_path.write_text("Region ready\nfrontend exited with 1; restarting it\n")

    digest = region.log_digest()

    assert "== tether-up.log (2 lines) ==\nfrontend exited with 1; restarting it" in digest
    assert (
        "== scheduler-shard-0-a.log (4 lines) ==\n"
        "WARNING admission: deposed: the ledger moved\n"
        "Traceback (most recent call last):"
    ) in digest
    assert "placed 4 tasks" not in digest
    assert "frontend.log" not in digest


def test_only_the_last_lines_of_note_are_kept(tmp_path: Path) -> None:
    region = LocalRegion(tmp_path / "tether", port=18080)
    region.output_path.write_text("".join(f"ERROR number {n}\n" for n in range(50)))

    lines = region.log_digest(lines_per_log=3).splitlines()

    assert lines == ["== tether-up.log (50 lines) ==", *(f"ERROR number {n}" for n in (47, 48, 49))]


def test_a_region_that_logged_nothing_of_note_says_so(tmp_path: Path) -> None:
    region = LocalRegion(tmp_path / "tether", port=18080)

    assert region.log_digest() == "(no warnings or errors in the region's logs)"
