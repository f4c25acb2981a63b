"""The checked-in code in services/tether/proto is exactly what scripts/gen-protos makes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GEN_PROTOS = ROOT / "scripts" / "gen-protos"
CHECKED_IN = ROOT / "services" / "tether" / "proto"


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root (caches left out), keyed by its path relative to root."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def _run_gen_protos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GEN_PROTOS), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_checked_in_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    result = _run_gen_protos("--out", str(tmp_path))
    assert result.returncode == 0, result.stderr

    fresh, checked_in = _tree(tmp_path), _tree(CHECKED_IN)
    common = fresh.keys() & checked_in.keys()
    problems = [
        f"{label}: {', '.join(names)}"
        for label, names in (
            ("missing", sorted(fresh.keys() - checked_in.keys())),
            ("extra", sorted(checked_in.keys() - fresh.keys())),
            ("differ", sorted(n for n in common if fresh[n] != checked_in[n])),
        )
        if names
    ]
    message = "services/tether/proto is out of date; regenerate with scripts/gen-protos"
    assert not problems, message + "".join(f"\n  {p}" for p in problems)
    assert any(name.endswith("_pb2_grpc.pyi") for name in fresh)


def test_regeneration_is_stable_and_removes_stale_files(tmp_path: Path) -> None:
    stale = tmp_path / "gone" / "v1" / "gone_pb2.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("# left over from a deleted .proto\n")

    first = _run_gen_protos(f"--out={tmp_path}")
    assert first.returncode == 0, first.stderr
    assert not (tmp_path / "gone").exists()
    before = _tree(tmp_path)

    second = _run_gen_protos("--out", str(tmp_path))
    assert second.returncode == 0, second.stderr
    assert "(0 file(s) changed)" in second.stderr
    assert _tree(tmp_path) == before


def test_generated_grpc_code_imports_the_package_path() -> None:
    source = (CHECKED_IN / "taskcontrol" / "v1" / "taskcontrol_pb2_grpc.py").read_text()
    assert "from tether.proto.taskcontrol.v1 import taskcontrol_pb2" in source


def test_help_and_missing_venv_are_explained(tmp_path: Path) -> None:
    help_result = _run_gen_protos("--help")
    assert help_result.returncode == 0
    assert "--out DIR" in help_result.stdout

    # A copy of the script in a checkout without .venv says how to create one.
    (tmp_path / "scripts").mkdir()
    copy = tmp_path / "scripts" / "gen-protos"
    shutil.copy2(GEN_PROTOS, copy)
    result = subprocess.run(
        [str(copy)], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    assert result.returncode != 0
    assert "run scripts/test once to create .venv" in result.stderr
