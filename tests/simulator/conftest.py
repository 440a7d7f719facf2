"""Shared fixtures: the bundled conversation sample, whole and its first two minutes."""

from __future__ import annotations

import pytest

from kvcast.data import bundled_trace_path
from kvcast.features.traces import Trace, load_trace


@pytest.fixture(scope="session")
def bundled() -> Trace:
    return load_trace(bundled_trace_path("conversation"))


@pytest.fixture(scope="session")
def bundled_head(bundled: Trace) -> Trace:
    """The first two minutes of the bundled conversation sample (fast)."""
    return bundled.window(0, 120_000)
