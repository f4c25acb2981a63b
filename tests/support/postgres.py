"""A throwaway PostgreSQL server for the store's tests (Debian's `postgresql` package, which
scripts/test installs): its own data directory, socket and port, and a fresh database per test.

PostgreSQL refuses to run as root: as root (CI), its files belong to, and its processes run as,
the `postgres` user the package creates."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

import psycopg
import pytest

POSTGRES_ENV: Final = "TETHER_POSTGRES_BIN"
"""The directory of `initdb` and `postgres`; else the newest of /usr/lib/postgresql/*/bin."""
START_TIMEOUT_S: Final = 30.0


def postgres_bin() -> Path:
    """Where initdb and postgres are; a test that needs them and finds none fails."""
    given = os.environ.get(POSTGRES_ENV)
    found = [Path(given)] if given else sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    usable = [path for path in found if (path / "initdb").exists()]
    if not usable:
        pytest.fail(
            f"no PostgreSQL: scripts/test installs Debian's postgresql package; or set "
            f"{POSTGRES_ENV} to the directory of initdb and postgres"
        )
    return usable[-1]


class PostgresServer:
    """`start()` runs a server in a temporary directory; `database()` makes a fresh database
    and returns its store URL; `stop()` ends the server and removes its directory."""

    USER: Final = "tether"

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    def _as_postgres(self, command: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return command
        shutil.chown(self.directory, "postgres")
        # setpriv executes the command itself (runuser would stay its parent): a signal sent
        # to the process reaches PostgreSQL.
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *command]

    def start(self) -> None:
        binaries = postgres_bin()
        data = self.directory / "data"
        subprocess.run(
            self._as_postgres(
                [str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", self.USER]
            ),
            check=True,
            capture_output=True,
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        log = (self.directory / "postgres.log").open("wb")
        self._process = subprocess.Popen(
            self._as_postgres(
                [
                    str(binaries / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.directory),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    # The tests exercise the store, not the disk's fsync.
                    "-c",
                    "fsync=off",
                ]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self._dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    output = (self.directory / "postgres.log").read_text(errors="replace")
                    raise RuntimeError(f"PostgreSQL did not start:\n{output[-2000:]}") from None
                time.sleep(0.1)

    def database(self) -> str:
        """A new, empty database's store URL."""
        name = f"store_{next(self._names)}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        # Without a driver: the store picks the one `tether[postgresql]` installs.
        return f"postgresql://{self.USER}@127.0.0.1:{self.port}/{name}"

    def _dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.USER} dbname={database}"

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            # SIGINT: PostgreSQL's fast shutdown (sessions ended, no wait for them).
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
