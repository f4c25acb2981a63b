"""Liveness sockets: a standby connected to its leader's learns at once that the leader's process
died, rather than when the leader's lease lapses seconds later."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

CONNECT_TIMEOUT_S: Final = 2.0
RECONNECT_PAUSE_S: Final = (0.01, 0.5)
"""After a connection that closed at once, the pause before the next one: it doubles from the
first to the second figure while they keep closing. A dying process may accept one more
connection before its listening socket goes; a live one that keeps closing them (out of file
descriptors, say) costs a connection every half second rather than a busy loop."""


class LivenessSocket:
    """A TCP listener that holds every connection it accepts until its peer closes it, and says
    nothing. The kernel closes the connections when the process ends, however it ends (`kill -9`
    included), and refuses new ones from then on."""

    def __init__(self, host: str) -> None:
        self._host = host
        self._server: asyncio.Server | None = None
        self.address = ""
        """`host:port` once started."""

    async def start(self) -> str:
        """Listens on a free port of the host; returns `host:port`. Starting again is a no-op."""
        if self._server is None:
            self._server = await asyncio.start_server(self._hold, self._host, 0)
            port = self._server.sockets[0].getsockname()[1]
            self.address = f"{self._host}:{port}"
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    @staticmethod
    async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(4096):
                pass
        except OSError:
            pass
        finally:
            writer.close()


async def until_dead(address: str) -> None:
    """Returns once the process whose `LivenessSocket` listens at `address` has surely ended: a
    connection to it closed and the next one was refused (or the first was). A peer that cannot
    be reached, or does not answer, proves nothing: then this never returns, and the caller's
    lease decides."""
    host, _, port = address.rpartition(":")
    loop = asyncio.get_running_loop()
    shortest, longest = RECONNECT_PAUSE_S
    pause = 0.0
    while True:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(host, int(port))
        except ConnectionRefusedError:
            return
        except (OSError, TimeoutError):
            await asyncio.Event().wait()
        opened = loop.time()
        try:
            with contextlib.suppress(OSError):
                await reader.read()
        finally:
            writer.close()
        # Closed: the process ended, or its socket let go of us. A new connection tells which.
        held_long = loop.time() - opened >= longest
        pause = 0.0 if held_long else min(longest, max(shortest, 2 * pause))
        await asyncio.sleep(pause)
