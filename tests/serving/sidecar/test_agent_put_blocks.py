"""``PUT /v1/blocks`` on the agent: the local engine stores a block's bytes (JSON with base64,
or octet-stream with headers); the checksum is verified before the block is visible, a bad
one is a 422 naming ``checksum`` and stores nothing; the token is required; nothing is read."""

from __future__ import annotations

import base64
import contextlib

import httpx
import numpy as np

from kvcast.serving.agent import Agent, AgentConfig, checksum
from kvcast.serving.agent.api import build_app
from kvcast.serving.agent.control import AgentControl

TOKEN = "agent-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.asynccontextmanager
async def agent_api(**overrides):
    cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=1 << 18, token=TOKEN,
                      **overrides)  # fmt: skip
    async with Agent(cfg) as agent:
        control = AgentControl(agent)
        transport = httpx.ASGITransport(app=build_app(control, TOKEN))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
            yield client, agent


def _block(seed: int, n: int = 4096) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_json_and_octet_stream_uploads_store_verified_blocks(run) -> None:
    async def main() -> None:
        async with agent_api() as (client, agent):
            data = _block(1)
            body = {"tenant": "acme", "block_hash": 41, "checksum": checksum(data),
                    "data": base64.b64encode(data).decode()}  # fmt: skip
            r = await client.put("/v1/blocks", json=body, headers=AUTH)
            assert r.status_code == 200, r.text
            entry = r.json()
            assert entry == entry | {"tenant": "acme", "block_hash": 41, "state": "cached",
                                     "nbytes": len(data), "checksum": checksum(data)}  # fmt: skip
            assert "data" not in entry
            raw = _block(2)
            headers = {**AUTH, "Content-Type": "application/octet-stream",
                       "X-Kvcast-Tenant": "acme", "X-Kvcast-Block-Hash": "00ab",
                       "X-Kvcast-Checksum": str(checksum(raw)),
                       "X-Kvcast-State": "active"}  # fmt: skip
            r = await client.put("/v1/blocks", content=raw, headers=headers)
            assert r.status_code == 200 and r.json()["state"] == "active", r.text
            assert bytes(agent.store.peek("acme", 41).buffer.view()) == data
            assert bytes(agent.store.peek("acme", b"\x00\xab").buffer.view()) == raw
            metrics = (await client.get("/metrics")).text
            assert 'kvcast_agent_commands_received_total{command="put_block"} 2.0' in metrics

    run(main())


def test_a_wrong_checksum_or_missing_token_stores_nothing(run) -> None:
    async def main() -> None:
        async with agent_api() as (client, agent):
            data = _block(3)
            body = {"tenant": "acme", "block_hash": 9, "checksum": checksum(data) ^ 1,
                    "data": base64.b64encode(data).decode()}  # fmt: skip
            r = await client.put("/v1/blocks", json=body, headers=AUTH)
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.checksum"
            r = await client.put("/v1/blocks", json=body | {"checksum": checksum(data)})
            assert r.status_code == 401
            r = await client.put("/v1/blocks", json=body | {"data": "%%%"}, headers=AUTH)
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.data"
            r = await client.put("/v1/blocks", json=body | {"tenant": ""}, headers=AUTH)
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.tenant"
            headers = {**AUTH, "Content-Type": "application/octet-stream", "X-Kvcast-Tenant": "a"}
            r = await client.put("/v1/blocks", content=data, headers=headers)
            assert r.status_code == 422
            assert r.json()["detail"][0]["field"] == "header.x-kvcast-block-hash"
            assert len(agent.store) == 0 and agent.store.stats.rejected_checksum == 1

    run(main())


def test_a_block_beyond_the_capacity_is_a_409(run) -> None:
    async def main() -> None:
        async with agent_api() as (client, agent):
            data = _block(4, (1 << 20) + 1)
            headers = {**AUTH, "Content-Type": "application/octet-stream",
                       "X-Kvcast-Tenant": "acme", "X-Kvcast-Block-Hash": "5",
                       "X-Kvcast-Checksum": str(checksum(data))}  # fmt: skip
            r = await client.put("/v1/blocks", content=data, headers=headers)
            assert r.status_code == 409 and "no room" in r.json()["detail"]
            assert len(agent.store) == 0

    run(main())


def test_header_hashes_are_decimal_u64_or_0x_hex_bytes_and_odd_digits_are_a_422(run) -> None:
    async def main() -> None:
        async with agent_api() as (client, agent):
            data = _block(5)
            base = {**AUTH, "Content-Type": "application/octet-stream", "X-Kvcast-Tenant": "acme",
                    "X-Kvcast-Checksum": str(checksum(data))}  # fmt: skip
            for text in ("1234", "0x1234"):
                r = await client.put("/v1/blocks", content=data,
                                     headers=base | {"X-Kvcast-Block-Hash": text})  # fmt: skip
                assert r.status_code == 200, r.text
            assert {i.block_hash for i in agent.store.inventory()} == {1234, b"\x12\x34"}
            for header in ("X-Kvcast-Block-Hash", "X-Kvcast-Checksum"):  # latin-1 superscript 2
                bad = base | {"X-Kvcast-Block-Hash": "7", header: b"\xb2"}
                r = await client.put("/v1/blocks", content=data, headers=bad)
                assert r.status_code == 422, r.text
                assert r.json()["detail"][0]["field"] == "header." + header.lower()

    run(main())


def test_header_hash_round_trip() -> None:
    from kvcast.serving.http.block_hash import hash_from_header, hash_to_header

    for h in (0, 1234, 2**64 - 1, b"\x12\x34", b"\x00\xab", bytes(range(32))):
        assert hash_from_header(hash_to_header(h)) == h


def test_overlong_or_non_decimal_header_numbers_are_a_422_naming_the_header(run) -> None:
    """Past Python's 4300-digit int limit a decimal header once raised a 500 (checksum) or
    leaked ``sys.set_int_max_str_digits`` advice (hash); ``1_000`` was read as 1000."""

    async def main() -> None:
        async with agent_api() as (client, agent):
            data = _block(6)
            base = {**AUTH, "Content-Type": "application/octet-stream", "X-Kvcast-Tenant": "acme",
                    "X-Kvcast-Block-Hash": "7",
                    "X-Kvcast-Checksum": str(checksum(data))}  # fmt: skip
            cases = [("X-Kvcast-Checksum", "9" * 5000), ("X-Kvcast-Block-Hash", "7" * 5000),
                     ("X-Kvcast-Checksum", "1_000"),
                     ("X-Kvcast-Checksum", "18446744073709551616")]  # fmt: skip
            for header, value in cases:
                r = await client.put("/v1/blocks", content=data, headers=base | {header: value})
                assert r.status_code == 422, (header, value[:20], r.status_code)
                (err,) = r.json()["detail"]
                assert err["field"] == "header." + header.lower(), r.text
                assert "set_int_max_str_digits" not in err["msg"], err["msg"]
            assert len(agent.store) == 0

    run(main())
