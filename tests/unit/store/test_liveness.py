"""Liveness sockets: a peer learns of a process's end at once, and of nothing else."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys

from tests.support.waiting import eventually
from tether.store.liveness import until_dead

# The child prints its socket's address, then a line for every connection it accepts.
CHILD = """
import asyncio
from tether.store.liveness import LivenessSocket

async def main():
    socket = LivenessSocket("127.0.0.1")
    hold = socket._hold
    async def announced(reader, writer):
        print("accepted", flush=True)
        await hold(reader, writer)
    socket._hold = announced
    print(await socket.start(), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_killed_process_is_known_dead_once_its_connection_closes() -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert child.stdout is not None
        address = (await child.stdout.readline()).decode().strip()
        watching = asyncio.create_task(until_dead(address))
        assert await child.stdout.readline() == b"accepted\n"
        assert not watching.done()

        child.send_signal(signal.SIGKILL)
        async with asyncio.timeout(10):
            await watching
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


async def test_a_refused_connection_means_dead_at_once() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with asyncio.timeout(5):
        await until_dead(f"127.0.0.1:{port}")


async def test_a_live_listener_that_drops_connections_is_not_taken_for_dead() -> None:
    accepted = 0

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    watching = asyncio.create_task(until_dead(f"127.0.0.1:{port}"))
    try:
        # Closed three times, it connected again each time: the listener is there.
        await eventually(lambda: accepted >= 3, what="three connections", timeout_s=10)
        assert not watching.done()
    finally:
        watching.cancel()
        server.close()
