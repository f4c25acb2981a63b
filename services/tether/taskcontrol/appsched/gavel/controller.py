"""`tether appsched gavel`: Gavel's rounds beside the entitlement's TaskController."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tether.taskcontrol.appsched.gang import GangController
from tether.taskcontrol.appsched.gavel.runner import GavelRunner


class GavelController(GangController):
    """Serves TaskController for the entitlement by the gang rule (its PREEMPT operations cover
    the whole job: the tasks of a suspended job stop together at once, rather than at the end
    of their grace) and runs the runner's rounds beside it, in a thread: the REST client
    blocks."""

    def __init__(self, runner: GavelRunner) -> None:
        super().__init__()
        self.runner = runner
        self._stopping = threading.Event()
        self._rounds: asyncio.Task[None] | None = None

    async def start(self, *args: Any, **kwargs: Any) -> None:
        await super().start(*args, **kwargs)
        self._stopping.clear()
        self._rounds = asyncio.create_task(
            asyncio.to_thread(self.runner.run, self._stopping), name="gavel rounds"
        )

    async def stop(self) -> None:
        """Lets the round under way finish (jobs stay as it leaves them), then unregisters."""
        self._stopping.set()
        try:
            if self._rounds is not None:
                await self._rounds
        finally:
            self._rounds = None
            await super().stop()
