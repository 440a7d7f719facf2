"""The engine's side of an agent in the serving tests: deterministic block bytes, blocks
stored into a real agent over its HTTP API (with their checksums), and the agent's inventory.
Imported by name from the tests below this folder (see ``conftest.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from kvcast.serving.agent.checksum import checksum

BLOCK = 256 << 10  # bytes of one test KV block
TENANT = "acme"


def block_data(h: int, nbytes: int = BLOCK) -> bytes:
    """The bytes of block ``h`` (the same every time: a copy can be checked against them)."""
    return np.random.default_rng(h % (1 << 32)).integers(0, 256, nbytes, np.uint8).tobytes()


async def put_blocks(
    http: httpx.AsyncClient, agent: str, hashes: list[int], auth: dict[str, str],
    nbytes: int = BLOCK, tenant: str = TENANT,
) -> dict[int, int]:  # fmt: skip
    """The engine stores ``hashes`` into its agent; their checksums."""
    sums = {}
    for h in hashes:
        raw = block_data(h, nbytes)
        sums[h] = checksum(raw)
        headers = {**auth, "Content-Type": "application/octet-stream", "X-Kvcast-Tenant": tenant,
                   "X-Kvcast-Block-Hash": str(h), "X-Kvcast-Checksum": str(sums[h])}  # fmt: skip
        r = await http.put(f"{agent}/v1/blocks", content=raw, headers=headers)
        assert r.status_code == 200, r.text
    return sums


async def inventory(http: httpx.AsyncClient, agent: str, auth: dict[str, str]) -> dict[int, Any]:
    """The agent's blocks by hash (each its inventory record)."""
    r = await http.get(f"{agent}/v1/inventory", headers=auth)
    assert r.status_code == 200, r.text
    return {b["block_hash"]: b for b in r.json()["blocks"]}


async def checksums(http: httpx.AsyncClient, agent: str, auth: dict[str, str]) -> dict[int, int]:
    """The agent's blocks by hash, each its checksum."""
    return {h: b["checksum"] for h, b in (await inventory(http, agent, auth)).items()}
