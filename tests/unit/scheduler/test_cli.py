"""`tether scheduler` refuses a bad shard id before touching any store."""

from __future__ import annotations

from typer.testing import CliRunner

from tether.cli.main import app


def test_shard_must_be_a_name() -> None:
    # Wide enough that the error panel does not wrap the message.
    runner = CliRunner(env={"COLUMNS": "300"})
    result = runner.invoke(app, ["scheduler", "--shard", "Shard_0", "--store", "bogus://x"])
    assert result.exit_code == 2
    assert "a-z, 0-9 and '-'" in result.output


def test_shard_is_required() -> None:
    result = CliRunner().invoke(app, ["scheduler"], env={"TETHER_SCHEDULER_SHARD": ""})
    assert result.exit_code == 2
    assert "--shard" in result.output
