"""What the transfer-server tests share as a raw peer: the token their sources are given and a
wait for a server-side condition. A peer reads the server's frames with the server's own
:func:`~kvcast.serving.agent.tcp_server.read_frame`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

TOKEN = "transfer-token"


async def until(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    """Until ``condition()`` holds (TimeoutError after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)
