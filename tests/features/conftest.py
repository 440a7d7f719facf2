"""Shared fixtures for the feature tests: real trace events, small configs, event factories."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kvcast.data import bundled_trace_path
from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event, RequestArrived, TelemetrySample
from kvcast.features.toy_replay import toy_events
from kvcast.features.traces import load_trace

NODES = 4


@pytest.fixture(scope="session")
def conversation_events() -> list[Event]:
    """The bundled conversation sample replayed with the toy placement (4 nodes)."""
    trace = load_trace(bundled_trace_path("conversation"))
    return toy_events(trace.requests, nodes=NODES)


@pytest.fixture
def cfg() -> FeatureConfig:
    """Four nodes, short windows, no negative sampling: small hand-made streams."""
    return FeatureConfig(
        nodes=NODES,
        heat_half_lives_ms=(1000.0, 10000.0),
        distinct_window_ms=20000.0,
        horizon_ms=60000.0,
        queue_windows_ms=(3000.0,),
        eviction_window_ms=3000.0,
        ticks={"period_ms": 1000.0, "lookback_ms": 10000.0},
        labels={"horizon_ms": 5000.0, "drop_censored": False},
        sampling={"negative_keep": 1.0},
    )


def request(
    ts: float,
    hashes: Sequence[int],
    node: int = 0,
    session: str | None = None,
    tenant: str = "t0",
    input_tokens: int | None = None,
    public_blocks: int = 0,
) -> RequestArrived:
    tokens = 512 * len(hashes) if input_tokens is None else input_tokens
    return RequestArrived(
        ts, f"r{ts}", node, tenant, session, tokens, 10, tuple(hashes), public_blocks
    )


def telemetry(ts: float, node: int, queue: int = 0, evictions: int = 0) -> TelemetrySample:
    return TelemetrySample(
        ts, node, queue, 100 * queue, 0, 0, 1000, 500, 400, 50, evictions, 10.0 * queue
    )


@pytest.fixture
def make_request() -> Callable[..., RequestArrived]:
    return request


@pytest.fixture
def make_telemetry() -> Callable[..., TelemetrySample]:
    return telemetry
