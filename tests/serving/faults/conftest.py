"""Fixtures for the fault tests: a bounded asyncio runner, a real ONNX model, and the processes
a test starts (killed at its end, by their own handles, whatever happened)."""

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

    def run_bounded(coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return run_bounded


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    from onnx_models import write_recency_model

    return write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Append every ``serve_processes.Service`` started; each is killed at the end."""
    import signal

    started: list[Any] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
        p.kill()
