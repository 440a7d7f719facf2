"""Helpers for the fault tests: configs and blocks for real agent and sidecar processes, the
engine's and the router's part (blocks stored into agents, KV events, arrivals, queue depths),
and readers of inventories and Prometheus metrics."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from agent_blocks import BLOCK, TENANT

from kvcast.serving.cluster.summary import parse_metrics

MiB = 1 << 20
BLOCK_TOKENS = 512  # the features' default block size
CHAIN_BLOCKS = 8


def token_env(token: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}


def chain(seed: int) -> list[int]:
    return [(seed << 32) + i for i in range(CHAIN_BLOCKS)]


def write_yaml(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def sidecar_yaml(
    tmp_path: Path, nodes: list[dict[str, Any]], model: Path, block_bytes: int = BLOCK,
    **extra: Any,
) -> str:  # fmt: skip
    """An active sidecar on loopback, ticking every 100 ms, pricing ``block_bytes`` blocks,
    with no HBM safety margin (test agents hold megabytes, not GiB) and 3/4 of a node's
    capacity open to speculative replicas."""
    decider = write_yaml(tmp_path / "decider.yaml", {
        "costs": {"safety_margin_gib": 0.0}, "budgets": {"speculative_quota_fraction": 0.75},
    })  # fmt: skip
    agents = {"telemetry_period_s": 0.2, "timeout_s": 5.0} | extra.pop("agents", {})
    data = {
        "listen": "127.0.0.1:0", "mode": "active", "model": str(model), "decider": decider,
        "block_bytes": block_bytes, "tick_ms": 100.0, "nodes": nodes, "agents": agents,
        "decision_log": {"path": str(tmp_path / "decisions.parquet")},
    } | extra  # fmt: skip
    return write_yaml(tmp_path / "sidecar.yaml", data)


async def busy(http: httpx.AsyncClient, agent: str, auth: dict[str, str], depth: int = 4) -> None:
    """The node's engine reports ``depth`` waiting requests to its agent."""
    r = await http.post(f"{agent}/v1/engine-stats", headers=auth,
                        json={"engine_id": "vllm-0", "queue_depth": depth})  # fmt: skip
    assert r.status_code == 204, r.text


async def announce(
    http: httpx.AsyncClient, sidecar: str, node: str, chains: list[list[int]],
    auth: dict[str, str],
) -> None:  # fmt: skip
    """``node``'s engine posts BlockStored for ``chains``."""
    events = [{"type": "BlockStored", "block_hashes": c, "block_size": BLOCK_TOKENS}
              for c in chains]  # fmt: skip
    r = await http.post(f"{sidecar}/v1/kv-events", json={"node": node, "events": events},
                        headers=auth)  # fmt: skip
    assert r.status_code == 202, r.text


async def arrive(
    http: httpx.AsyncClient, sidecar: str, node: str, chains: list[list[int]],
    auth: dict[str, str], tag: str = "r",
) -> None:  # fmt: skip
    """The router routes one request per chain to ``node``, 4 requests waiting there."""
    reqs = [{"request_id": f"{tag}{i}-{node}", "node": node, "tenant": TENANT, "block_hashes": c,
             "input_tokens": len(c) * BLOCK_TOKENS + 100, "queue_depth": 4}
            for i, c in enumerate(chains)]  # fmt: skip
    r = await http.post(f"{sidecar}/v1/requests", json={"requests": reqs}, headers=auth)
    assert r.status_code == 202, r.text


async def metrics(http: httpx.AsyncClient, base: str) -> dict[str, float]:
    return parse_metrics((await http.get(f"{base}/metrics")).text)


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Poll ``check`` every 50 ms until it holds; fail naming ``what`` past ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s} s: {what}") from None
