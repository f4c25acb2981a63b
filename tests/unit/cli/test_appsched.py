"""`tether appsched ...`: argument errors and refused registrations, each a one-line message."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import NoReturn

import grpc
import httpx
import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import Result

from tests.support.region import write_region_file
from tests.unit.cli.conftest import FakeAPI, run
from tether.cli import appsched
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.store.etcd_server import free_port

COMMANDS = ("rolling", "replicas", "gang")
A_MAP = ("--shard-map", "shards.json")


@pytest.fixture(autouse=True)
def elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Each test in an empty directory (no local region), with the root logger as it was: a
    command that gets as far as serving configures logging for its process."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shards.json").write_text(json.dumps({"shards": {"s": [0, 1]}}))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield tmp_path
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def appsched_run(command: str, *args: str, env: dict[str, str | None] | None = None) -> Result:
    map_args = A_MAP if command == "replicas" and "--shard-map-url" not in args else ()
    return run("appsched", command, *map_args, *args, env=env)


def error_line(result: Result) -> str:
    """The one line of the error, after checking it is the whole story: no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "scope",
    [(), ("--job", "ml/train", "--entitlement", "ml")],
    ids=["neither", "both"],
)
def test_exactly_one_of_job_and_entitlement(command: str, scope: tuple[str, ...]) -> None:
    line = error_line(appsched_run(command, *scope))
    assert "exactly one of --job" in line


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        (("--job", "no-slash"), "invalid job handle 'no-slash'"),
        (("--job", "ml/Train"), "invalid job handle 'ml/Train'"),
        (("--entitlement", "ML_team"), "invalid entitlement 'ML_team'"),
    ],
)
def test_malformed_scopes_are_refused(scope: tuple[str, ...], message: str) -> None:
    assert message in error_line(appsched_run("gang", *scope))


@pytest.mark.parametrize("value", ["ten", "0", "0%", "150%", "1.5%", "-2"])
def test_a_bad_max_unavailable_is_refused(value: str) -> None:
    line = error_line(appsched_run("rolling", "--job", "ml/train", "--max-unavailable", value))
    assert line.startswith(f"error: --max-unavailable: {value!r}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--shard-map", "missing.json"), "cannot read the shard map missing.json"),
        (("--shard-map", "."), "cannot read the shard map ."),
        (("--shard-map", "bad.json"), "shard map bad.json: not JSON"),
        (("--shard-map", "shape.json"), "shard map shape.json: shard 'a': expected a list"),
        (("--shard-map-url", "ftp://app/shards"), "expected an http:// or https:// URL"),
        (("--shard-map-url", "app:80/shards"), "expected an http:// or https:// URL"),
        (
            ("--shard-map", "shards.json", "--shard-map-url", "http://app/shards"),
            "exactly one of --shard-map",
        ),
    ],
)
def test_bad_shard_maps_are_refused(elsewhere: Path, args: tuple[str, ...], message: str) -> None:
    (elsewhere / "bad.json").write_text('{"shards": ')
    (elsewhere / "shape.json").write_text('{"shards": {"a": "0,1"}}')
    result = run("appsched", "replicas", "--job", "ml/train", *args)
    assert message in error_line(result)


def test_replicas_needs_a_shard_map() -> None:
    result = run("appsched", "replicas", "--job", "ml/train")
    assert "exactly one of --shard-map" in error_line(result)


@pytest.mark.parametrize("listen", ["7000", "127.0.0.1", "127.0.0.1:port", "127.0.0.1:70000"])
def test_a_malformed_listen_address_is_refused(listen: str) -> None:
    line = error_line(appsched_run("gang", "--job", "ml/train", "--listen", listen))
    assert f"--listen {listen!r}: expected HOST:PORT" in line


def test_a_listen_port_in_use_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        line = error_line(appsched_run("gang", "--job", "ml/train", "--listen", listen))
    assert f"cannot listen on {listen}" in line


def test_without_a_token_it_says_where_to_get_one() -> None:
    result = appsched_run("gang", "--job", "ml/train", env={"TETHER_TOKEN": None})
    assert "no token: pass --token or set TETHER_TOKEN" in error_line(result)


class RefusingRegistry(taskcontrol_pb2_grpc.TaskControllerRegistryServicer):
    """A registry that refuses every call with one status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        self.requests: list[object] = []

    def refuse(self, request: object, context: grpc.ServicerContext) -> NoReturn:
        self.requests.append(request)
        context.abort(self.code, self.details)

    Register = Renew = Unregister = List = refuse


def serve_registry(registry: RefusingRegistry) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    taskcontrol_pb2_grpc.add_TaskControllerRegistryServicer_to_server(registry, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("code", "details", "hint"),
    [
        (grpc.StatusCode.PERMISSION_DENIED, "not a member of entitlement 'ml'", False),
        (grpc.StatusCode.UNAUTHENTICATED, "unknown token", True),
    ],
)
def test_a_refused_registration_is_one_line(
    code: grpc.StatusCode, details: str, hint: bool
) -> None:
    registry = RefusingRegistry(code, details)
    server, address = serve_registry(registry)
    try:
        result = appsched_run("gang", "--entitlement", "ml", "--registry", address)
    finally:
        server.stop(None)
    assert error_line(result) == (
        f"error: the TaskController registry at {address} refused the registration: "
        f"{code.name}: {details}"
    )
    assert ("hint: pass --token" in result.stderr) is hint
    [registered] = registry.requests
    assert isinstance(registered, pb.RegisterRequest)
    assert (registered.entitlement, registered.ttl_seconds) == ("ml", 0)
    assert registered.endpoint.startswith("127.0.0.1:")


def test_by_default_it_registers_with_the_local_region(elsewhere: Path) -> None:
    # `tether up` records where its registry listens; here, a port nobody listens on.
    address = f"127.0.0.1:{free_port()}"
    write_region_file(elsewhere / ".tether", registry_address=address)
    line = error_line(appsched_run("rolling", "--job", "ml/train"))
    assert line.startswith(f"error: cannot reach the TaskController registry at {address}")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_explains_every_option(command: str) -> None:
    result = run("appsched", command, "--help")
    assert result.exit_code == 0, result.output
    group = typer.main.get_command(appsched.app)
    assert isinstance(group, TyperGroup)
    options = group.commands[command].params
    assert {"--job", "--entitlement", "--registry", "--listen", "--ttl", "--token"} <= {
        option.opts[0] for option in options
    }
    for option in options:
        assert isinstance(option, TyperOption)
        assert option.help, option.opts
        assert option.opts[0] in result.stdout


GAVEL = ("--entitlement", "ml", "--token", "tok", "--registry", "127.0.0.1:1")


def test_gavel_refuses_an_unknown_policy_and_bad_counts(elsewhere: Path) -> None:
    (elsewhere / "p.json").write_text("{}")
    policy = appsched_run("gavel", *GAVEL, "--profile", "p.json", "--policy", "fastest")
    assert "--policy 'fastest': expected one of fifo, fifo_perf" in error_line(policy)
    counts = appsched_run("gavel", *GAVEL, "--profile", "p.json", "--accelerators", "v100")
    assert "expected TYPE=N,... (v100=8,k80=16)" in error_line(counts)


def test_gavel_reads_its_profile_from_a_file_or_the_region(api: FakeAPI, elsewhere: Path) -> None:
    missing = appsched_run("gavel", *GAVEL, "--profile", "missing.json")
    assert "error: --profile: missing.json:" in error_line(missing)
    (elsewhere / "bad.json").write_text('{"v100": {"A3C": {"0": 1}}}')
    bad = appsched_run("gavel", *GAVEL, "--profile", "bad.json")
    assert "scale factor '0' is not 1 or more" in error_line(bad)
    # ENTITLEMENT/NAME: the profile kept in the region, then the machines (none with GPUs).
    kept = {"name": "measured", "entitlement": "ml", "throughputs": {"v100": {"A3C": {"1": 2}}}}
    api.on("GET", "/v1/throughput-profiles/ml/measured", httpx.Response(200, json=kept))
    api.on("GET", "/v1/machines", httpx.Response(200, json={"machines": []}))
    region = appsched_run("gavel", *GAVEL, "--profile", "ml/measured")
    assert "no accelerators" in error_line(region)
    assert [request.url.path for request in api.requests] == [
        "/v1/throughput-profiles/ml/measured",
        "/v1/machines",
    ]
