"""Helpers for the sidecar tests: configs, an in-process sidecar with an httpx client on its
ASGI app or on its API served over a real socket, arrivals and tenant tokens' headers, and a
situation in which the decider replicates a chain."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

MiB = 1 << 20
NAMES = ("node-a", "node-b")
CHAIN_BLOCKS, BLOCK_TOKENS = 8, 512  # the features' default block size
TOKEN = "sidecar-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def decider_yaml(tmp_path: Path) -> Path:
    """Decider defaults, but no HBM safety margin (test agents hold megabytes, not GiB)."""
    path = tmp_path / "decider.yaml"
    path.write_text("costs:\n  safety_margin_gib: 0.0\n")
    return path


def sidecar_config(tmp_path: Path, **overrides: Any) -> Any:
    from kvcast.serving.sidecar.config import SidecarConfig

    data: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "nodes": [{"name": n} for n in NAMES],
        "decider": str(decider_yaml(tmp_path)),
        "block_bytes": 256 << 10,
        "decision_log": {"path": str(tmp_path / "decisions.parquet"), "rows_per_chunk": 2},
        "agents": {"telemetry_period_s": 0.2, "timeout_s": 5.0},
    }
    return SidecarConfig.model_validate(data | overrides)


def tenant_secrets(cfg: Any) -> dict[str, frozenset[str]]:
    """The config's tenant tokens read from the environment, as ``kvcast serve sidecar``
    reads them (token -> its tenants)."""
    from kvcast.serving.http.tenant_tokens import read_tenant_tokens

    return read_tenant_tokens(cfg.tenant_tokens, cfg.token_value, os.environ)


def make_sidecar(cfg: Any, **sidecar: Any) -> Any:
    """A :class:`Sidecar` of ``cfg`` (``sidecar``: more of its arguments), its tenant tokens
    read from the environment unless given."""
    from kvcast.serving.sidecar.core import Sidecar

    sidecar.setdefault("tenant_tokens", tenant_secrets(cfg))
    return Sidecar(cfg, **sidecar)


@contextlib.asynccontextmanager
async def open_sidecar(cfg: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A started :class:`Sidecar` (no tick thread: tests tick) and an httpx client on its app."""
    import httpx

    from kvcast.serving.sidecar.api import build_app

    sc = make_sidecar(cfg)
    await sc.start(decisions=False)
    try:
        transport = httpx.ASGITransport(app=build_app(sc))
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
            yield sc, client
    finally:
        await sc.stop()


@contextlib.asynccontextmanager
async def served(cfg: Any, **sidecar: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A started sidecar (no tick thread: tests tick; ``sidecar``: more arguments of
    :class:`Sidecar`, e.g. its ``monotonic`` clock; its tenant tokens read from the
    environment unless given) with its API served by uvicorn on a free port, and an httpx
    client of it."""
    import httpx

    from kvcast.serving.http.server import HttpServer
    from kvcast.serving.sidecar.api import build_app

    sc = make_sidecar(cfg, **sidecar)
    await sc.start(decisions=False)
    server = HttpServer(build_app(sc), "127.0.0.1", 0, limits=cfg.http)
    try:
        address = await server.start()
        async with httpx.AsyncClient(base_url=f"http://{address}", timeout=10.0) as client:
            yield sc, client
    finally:
        await server.stop()
        await sc.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def arrival(rid: str, tenant: str, hashes: list[int], public: int = 0) -> dict[str, Any]:
    return {"request_id": rid, "node": "node-a", "tenant": tenant, "block_hashes": hashes,
            "input_tokens": len(hashes) * BLOCK_TOKENS, "public_blocks": public}  # fmt: skip


async def refusals(client: Any) -> dict[str, float]:
    """``kvcast_sidecar_tenant_refusals_total`` by reason, as the API's ``/metrics`` says."""
    from kvcast.serving.cluster.summary import by_label, parse_metrics

    text = (await client.get("/metrics")).text
    return by_label(parse_metrics(text), "kvcast_sidecar_tenant_refusals_total")


def no_refusals(**counts: float) -> dict[str, float]:
    """:func:`refusals` when none were refused but these ``reason=count``."""
    zero = ("route", "tenant", "queue_depth", "rate", "burst", "queue_share")
    return dict.fromkeys(zero, 0.0) | counts


async def settle(sc: Any, timeout_s: float = 5.0) -> None:
    """Until every event queued so far has been applied to the feature state."""
    async with asyncio.timeout(timeout_s):
        while len(sc.queue):
            await asyncio.sleep(0.005)
        await asyncio.wrap_future(sc.keeper.ask(lambda k: None))


async def tick(sc: Any) -> list[Any]:
    return await asyncio.to_thread(sc.loop.tick)


def telemetry(node_id: str, capacity: int = 64 * MiB, queue_depth: int | None = None) -> Any:
    from kvcast.serving.agent.api_models import StateTotals, Telemetry

    zero = StateTotals(active=0, cached=0, speculative=0)
    return Telemetry(
        node_id=node_id, capacity_bytes=capacity, used_bytes=0, free_bytes=capacity,
        speculative_quota_bytes=capacity // 4, speculative_free_bytes=capacity // 4,
        bytes=zero, blocks=zero, peak_used_bytes=0, peak_speculative_bytes=0,
        replications_in_flight=0, queue_depth=queue_depth, engines=[],
    )  # fmt: skip


def chain(seed: int = 1) -> list[int]:
    return [(seed << 32) + i for i in range(CHAIN_BLOCKS)]


REQUEST_IDS = itertools.count(1)  # each arrival its own id: a repeated one counts once


async def hot_chain_on_node_a(client: Any, hashes: list[int], tenant: str = "acme") -> None:
    """Node a holds ``hashes`` in GPU memory and has 4 requests queued; a request with that
    prefix just arrived there: the decider then copies the chain to the idle node b."""
    stored = {"type": "BlockStored", "block_hashes": hashes, "block_size": BLOCK_TOKENS}
    r = await client.post("/v1/kv-events", json={"node": "node-a", "events": [stored]},
                          headers=AUTH)  # fmt: skip
    assert r.status_code == 202, r.text
    routed = {
        "request_id": f"r-{next(REQUEST_IDS)}", "node": "node-a", "tenant": tenant,
        "session": "s-1",
        "block_hashes": hashes, "input_tokens": len(hashes) * BLOCK_TOKENS + 100,
        "output_tokens": 64, "queue_depth": 4,
    }  # fmt: skip
    r = await client.post("/v1/requests", json={"requests": [routed]}, headers=AUTH)
    assert r.status_code == 202, r.text


async def engine_stored(
    client: Any, sc: Any, node: str, hashes: list[int], auth: dict[str, str], released: int
) -> None:
    """``node``'s engine reports it stored ``hashes`` (a vLLM ``BlockStored``, posted); waits
    until the sidecar has released ``released`` holds on the agents in all."""
    stored = [{"type": "BlockStored", "block_hashes": hashes, "block_size": 512}]
    r = await client.post("/v1/kv-events", json={"node": node, "events": stored}, headers=auth)
    assert r.status_code == 202
    await settle(sc)
    async with asyncio.timeout(5):
        while sc.executor.claims["released"] < released:
            await asyncio.sleep(0.05)
