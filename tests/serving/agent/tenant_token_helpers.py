"""What the tenant-token tests of the agent share: the tokens, blocks put straight into a
store, uploads in both body forms, and waiting on a condition."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

from kvcast.serving.agent import Agent, HostBuffer, checksum

SHARED = "shared-s3cret"
ACME = "acme-s3cret"  # speaks for acme and initech
TOKENS = {ACME: frozenset({"acme", "initech"})}
ADMIN = {"Authorization": f"Bearer {SHARED}"}
TENANT = {"Authorization": f"Bearer {ACME}"}


def put(agent: Agent, tenant: str, h: int, nbytes: int = 100) -> None:
    buf = HostBuffer.from_bytes(bytes([h % 251]) * nbytes)
    agent.store.put(tenant, h, buf, checksum(buf.view()))


def upload_json(tenant: str, h: int, state: str = "cached") -> dict:
    data = bytes([h]) * 64
    body = {"tenant": tenant, "block_hash": h, "state": state}
    return body | {"checksum": checksum(memoryview(data)), "data": base64.b64encode(data).decode()}


def upload_raw(tenant: str, h: int, state: str = "cached") -> dict:
    data = bytes([h]) * 64
    headers = {"content-type": "application/octet-stream", "x-kvcast-tenant": tenant,
               "x-kvcast-block-hash": str(h), "x-kvcast-checksum": str(checksum(memoryview(data))),
               "x-kvcast-state": state} | TENANT  # fmt: skip
    return {"content": data, "headers": headers}


async def until_true(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never became true")
