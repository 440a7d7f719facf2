"""Idempotent commands: the outcome of each command id, so a repeated id moves nothing.

A repeat of a command still running waits for that run; a repeat of a finished one gets the
recorded result. The log keeps the most recent ``capacity`` finished commands.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

R = TypeVar("R")


class CommandLog(Generic[R]):
    def __init__(self, capacity: int = 4096) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be > 0")
        self.capacity = capacity
        self._runs: OrderedDict[str, asyncio.Future[R]] = OrderedDict()
        self.duplicates = 0

    def __contains__(self, command_id: str) -> bool:
        return command_id in self._runs

    async def run_once(self, command_id: str, run: Callable[[], Awaitable[R]]) -> R:
        """Run ``run`` for a new ``command_id``; for a known one, return its (awaited) result."""
        if (known := self._runs.get(command_id)) is not None:
            self.duplicates += 1
            return await asyncio.shield(known)
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._runs[command_id] = future
        try:
            result = await run()
        except BaseException as err:
            # Not a recorded outcome (cancelled or crashed): forget it so the id may run again.
            del self._runs[command_id]
            if isinstance(err, Exception):
                future.set_exception(err)
                future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            else:
                future.cancel()
            raise
        future.set_result(result)
        self._trim()
        return result

    def _trim(self) -> None:
        if len(self._runs) <= self.capacity:
            return
        done = [cid for cid, fut in self._runs.items() if fut.done()]
        for cid in done[: max(0, len(self._runs) - self.capacity)]:
            del self._runs[cid]
