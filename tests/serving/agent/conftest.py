"""Helpers for the agent-core tests: deterministic blocks, bounded asyncio runs, agent pairs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

from kvcast.serving.agent import Agent, AgentConfig, HostBuffer, checksum

MiB = 1 << 20


def block_bytes(seed: int, nbytes: int) -> np.ndarray:
    """Deterministic pseudo-random block contents."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


@pytest.fixture
def make_block() -> Callable[[int, int], tuple[HostBuffer, int]]:
    """(seed, nbytes) -> a host buffer and its correct checksum."""

    def make(seed: int, nbytes: int = 64 << 10) -> tuple[HostBuffer, int]:
        buf = HostBuffer(block_bytes(seed, nbytes))
        return buf, checksum(buf.view())

    return make


@pytest.fixture
def run() -> Callable[..., Any]:
    """Run a coroutine on a fresh event loop, failing the test if it takes over ``timeout``."""

    def run_bounded(coro: Coroutine[Any, Any, Any], timeout: float = 5.0) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return run_bounded


def agent_config(**overrides: Any) -> AgentConfig:
    base: dict[str, Any] = {
        "capacity_bytes": 64 * MiB,
        "speculative_quota_bytes": 32 * MiB,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    return AgentConfig(**(base | overrides))


@pytest.fixture
def config() -> Callable[..., AgentConfig]:
    """Agent config for loopback tests (ephemeral port, fast back-off), with overrides."""
    return agent_config


def fill(agent: Agent, tenant: str, blocks: dict[int, int]) -> dict[int, bytes]:
    """Store ``{hash: nbytes}`` cached blocks of ``tenant`` on ``agent``; return their bytes."""
    out = {}
    for h, nbytes in blocks.items():
        data = block_bytes(h * 7919 + len(tenant), nbytes)
        buf = HostBuffer(data)
        agent.store.put(tenant, h, buf, checksum(buf.view()))
        out[h] = data.tobytes()
    return out


@pytest.fixture
def fill_agent() -> Callable[[Agent, str, dict[int, int]], dict[int, bytes]]:
    return fill


@pytest.fixture
def control_api() -> Callable[..., Any]:
    """``async with control_api(token=None, tenant_tokens=None, **config) as (client,
    control)``: an agent whose transfer server listens on loopback, and an httpx client on its
    ASGI control app; ``token`` guards both the HTTP routes and the agent's pulls, as in
    ``kvcast serve agent``, and ``tenant_tokens`` (secret -> tenants) speak for some tenants
    (``limits``: secret -> more keys of its entry, ``max_bytes`` say); the config's
    ``ingest_token`` (in ``config``) is handed to the app as the service hands it."""
    import contextlib

    import httpx

    from kvcast.serving.agent.api import build_app
    from kvcast.serving.agent.control import AgentControl

    @contextlib.asynccontextmanager
    async def open_api(
        token: str | None = None, tenant_tokens: dict[str, frozenset[str]] | None = None,
        limits: dict[str, dict[str, Any]] | None = None, **overrides: Any,
    ) -> Any:  # fmt: skip
        more = limits or {}
        entries = [{"tenants": sorted(t), "token_env": f"KT_{i}", **more.get(k, {})}
                   for i, (k, t) in enumerate((tenant_tokens or {}).items())]  # fmt: skip
        cfg = agent_config(token=token, tenant_tokens=entries, **overrides)
        async with Agent(cfg, tenant_tokens=tenant_tokens) as agent:
            control = AgentControl(agent)
            app = build_app(control, agent.config.token_value, agent.tenant_tokens,
                            agent.config.ingest_token_value)  # fmt: skip
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
                yield client, control

    return open_api


def metric_value(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(f"{name} {labels} not in the metrics")


@pytest.fixture
def metric() -> Callable[..., float]:
    """(Prometheus text, sample name, **labels) -> the sample's value (KeyError if absent)."""
    return metric_value
