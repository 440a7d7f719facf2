"""Fixtures for the local-cluster tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest


@pytest.fixture
def run_async() -> Callable[..., Any]:
    """Run a coroutine on a fresh event loop, failing the test past ``timeout`` seconds."""

    def run(coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return run
