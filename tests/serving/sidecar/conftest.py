"""Fixtures for the sidecar tests: a bounded asyncio runner, a real ONNX model file, and the
agent processes a test starts (killed at its end)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec


@pytest.fixture
def run() -> Callable[..., Any]:
    """Run a coroutine on a fresh event loop, failing the test past ``timeout`` seconds."""

    def run_bounded(coro: Coroutine[Any, Any, Any], timeout: float = 20.0) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return run_bounded


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    from onnx_models import write_recency_model

    return write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))


@pytest.fixture
def agents() -> Iterator[list[Any]]:
    """Agent processes (``serve_processes.start_agent``) the test appends; killed at its end."""
    started: list[Any] = []
    yield started
    for agent in started:
        agent.kill()
