"""Tenant tokens on an agent, their limits: uploads stop at the entry's ``max_bytes`` (the
store reads its tenants' bytes as it puts the block, replicas included; 409, nothing stored),
HTTP requests at its ``max_requests_per_s`` (429 with Retry-After, nothing done), pulls at its
``max_pulls`` at once (BUSY before the request is read, over real loopback sockets); the
entries' ``max_pulls`` must leave the agents' own pulls a connection; malformed entries are
refused naming the key; the shared token is never limited."""

from __future__ import annotations

import asyncio

import pytest
from tenant_token_helpers import ACME, ADMIN, SHARED, TENANT, TOKENS, put, until_true, upload_json

from kvcast.serving.agent import HostBuffer, checksum
from kvcast.serving.agent.blocks import BlockState


def test_a_tenant_tokens_uploads_stop_at_its_max_bytes(run, control_api) -> None:
    """Its tenants' blocks, replicas included, count against its entry's cap; a new block past
    it is 409 and nothing is stored (nothing of another tenant's evicted for it); a block
    already held adds nothing; evicting makes room again; the shared token is not capped."""

    async def scenario() -> None:
        cap = {ACME: {"max_bytes": 200}}
        async with control_api(token=SHARED, tenant_tokens=TOKENS, limits=cap) as (
            api, control,
        ):  # fmt: skip
            store = control.agent.store
            put(control.agent, "initech", 1, nbytes=100)  # a replica of one of its tenants
            put(control.agent, "globex", 2, nbytes=500)  # another tenant's: not counted
            r = await api.put("/v1/blocks", json=upload_json("acme", 3), headers=TENANT)
            assert r.status_code == 200  # 100 + 64 <= 200
            before = sorted((i.tenant, i.block_hash) for i in store.inventory())
            r = await api.put("/v1/blocks", json=upload_json("acme", 4), headers=TENANT)
            assert r.status_code == 409, r.text
            detail = r.json()["detail"]
            assert "take 164 bytes on this agent; a new block of 64 would pass" in detail
            assert "its max_bytes of 200" in detail
            assert sorted((i.tenant, i.block_hash) for i in store.inventory()) == before
            r = await api.put("/v1/blocks", json=upload_json("acme", 3), headers=TENANT)
            assert r.status_code == 200  # already held: a repeat adds nothing
            r = await api.post("/v1/evict", json={"tenant": "initech", "block_hashes": [1]},
                               headers=TENANT)  # fmt: skip
            assert r.json()["evicted"] == [1]
            r = await api.put("/v1/blocks", json=upload_json("acme", 4), headers=TENANT)
            assert r.status_code == 200 and store.tenant_bytes(["acme", "initech"]) == 128
            for h in (5, 6, 7):  # the shared token: no cap
                r = await api.put("/v1/blocks", json=upload_json("acme", h), headers=ADMIN)
                assert r.status_code == 200

    run(scenario())


def test_the_cap_is_read_as_the_store_puts_the_block() -> None:
    """A replica of the token's tenant that expires while its upload is on the way (under that
    replica's hash) no longer lets the upload skip the cap: the store reads it after
    reclaiming expired replicas, as it stores the block. Empty blocks count as blocks."""
    from kvcast.serving.agent.block_store import BlockStore
    from kvcast.serving.agent.blocks import OverTenantCap

    now = [0.0]
    store = BlockStore(1 << 20, 1 << 20, speculative_ttl_s=5.0, clock=lambda: now[0])

    def block(nbytes: int) -> tuple[HostBuffer, int]:
        buf = HostBuffer.from_bytes(b"x" * nbytes)
        return buf, checksum(buf.view())

    store.put("acme", 1, *block(800))
    store.put("acme", 2, *block(100), state=BlockState.SPECULATIVE)
    store.put("acme", 3, *block(0), state=BlockState.SPECULATIVE)
    cap = (frozenset({"acme"}), 1000)
    assert store.info("acme", 2) is not None  # what a check before the put would see
    now[0] = 6.0  # both replicas expire before the put
    with pytest.raises(OverTenantCap, match="take 800 bytes; a new block of 600 would pass"):
        store.put("acme", 2, *block(600), cap=cap)
    assert store.info("acme", 2) is None and store.tenant_bytes(["acme"]) == 800
    assert store.stats.rejected_tenant_cap == 1
    store.put("acme", 2, *block(200), cap=cap)  # up to the cap exactly
    store.put("acme", 2, *block(200), cap=cap)  # held already: adds nothing
    assert store.tenant_bytes(["acme"]) == 1000
    store.put("acme", 4, *block(0))
    store.evict("acme", 4)
    assert store.tenant_bytes(["acme"]) == 1000 and store.evict("acme", 1)
    assert store.tenant_bytes(["acme"]) == 200


def test_a_tenant_tokens_requests_stop_at_its_rate(run, control_api, metric) -> None:
    """Past its burst, a request is 429 with Retry-After and nothing is done; counted; the
    shared token is never limited."""

    async def scenario() -> None:
        limit = {ACME: {"max_requests_per_s": 0.01, "burst_requests": 2}}
        async with control_api(token=SHARED, tenant_tokens=TOKENS, limits=limit) as (
            api, control,
        ):  # fmt: skip
            for h in (1, 2, 3):
                put(control.agent, "acme", h)
            for h in (1, 2):
                r = await api.post("/v1/evict", json={"tenant": "acme", "block_hashes": [h]},
                                   headers=TENANT)  # fmt: skip
                assert r.status_code == 200 and r.json()["evicted"] == [h]
            r = await api.post("/v1/evict", json={"tenant": "acme", "block_hashes": [3]},
                               headers=TENANT)  # fmt: skip
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 99
            assert "rate limit (0.01 requests/s, bursts of 2) is spent" in r.json()["detail"]
            assert control.agent.store.info("acme", 3) is not None  # nothing done
            assert (await api.get("/v1/inventory", headers=TENANT)).status_code == 429
            for _ in range(5):
                assert (await api.get("/v1/inventory", headers=ADMIN)).status_code == 200
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_http_tenant_rate_limited_total") == 2
            labels = {"command": "evict", "reason": "rate_limited"}
            assert metric(text, "kvcast_agent_commands_refused_total", **labels) == 1

    run(scenario())


def test_a_tenant_token_is_served_at_most_its_max_pulls_at_once(run) -> None:
    """Over real loopback sockets: with one pull of the token open (its Hello read, its
    request not yet), a second is refused BUSY at once, before its request is read; the shared
    token's pulls are not counted; once the first ends, the token is served again."""
    from kvcast.serving.agent import BlockStore, TransferServer
    from kvcast.serving.agent.tcp_server import read_frame
    from kvcast.serving.messages import Done, Error, ErrorCode, Hello, PullRequest, encode

    async def hello(address: str, token: str):  # type: ignore[no-untyped-def]
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode(Hello("connector", token)))
        await writer.drain()
        return reader, writer

    async def scenario() -> None:
        server = TransferServer(BlockStore(1 << 20, 0), SHARED, 5.0, tenant_tokens=TOKENS,
                                tenant_pull_caps=[1])  # fmt: skip
        await server.start()
        try:
            _, first = await hello(server.address, ACME)
            await until_true(lambda: server.tenant_pulls.held(0) == 1)
            reader, writer = await hello(server.address, ACME)
            busy = await read_frame(reader)
            assert isinstance(busy, Error) and busy.code is ErrorCode.BUSY
            assert "this token has its 1 pulls at once" in busy.message
            writer.close()
            _, admin = await hello(server.address, SHARED)  # not a tenant token's pull
            first.close()
            await until_true(lambda: server.tenant_pulls.held(0) == 0)
            reader, writer = await hello(server.address, ACME)
            writer.write(encode(PullRequest("c", "acme", (7,))))
            assert isinstance(await read_frame(reader), Done)
            writer.close()
            admin.close()
            assert server.stats.tenant_busy_refused == 1
        finally:
            await server.stop()

    run(scenario(), timeout=10.0)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"burst_requests": 10}, "burst_requests needs max_requests_per_s"),
        ({"max_requests_per_s": 0}, "max_requests_per_s': Input should be greater than or "),
        ({"max_requests_per_s": 1e-310}, "max_requests_per_s': Input should be greater than "),
        ({"max_pulls": 0}, "max_pulls': Input should be greater than or equal to 1"),
        ({"max_bytes": "0"}, "max_bytes': Input should be greater than 0"),
        ({"max_bytes": "lots"}, "max_bytes'"),
    ],
)  # fmt: skip
def test_a_malformed_agent_tenant_token_entry_is_refused_naming_the_key(entry, message) -> None:
    from kvcast.config import ConfigError, parse_config
    from kvcast.serving.agent.config import AgentConfig

    data = {"capacity_bytes": "1GiB", "speculative_quota_bytes": "1MiB",
            "tenant_tokens": [{"tenants": ["acme"], "token_env": "KT_ACME"} | entry]}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        parse_config(AgentConfig, data, "agent.yaml")
    assert "key 'tenant_tokens.0" in str(err.value) and message in str(err.value)


def test_tenant_tokens_pulls_must_leave_the_agents_own_a_connection() -> None:
    from kvcast.config import ConfigError, parse_config
    from kvcast.serving.agent.config import AgentConfig

    def cfg(connections: int, *pulls: int) -> AgentConfig:
        tokens = [{"tenants": [f"t{i}"], "token_env": f"KT_{i}", "max_pulls": p}
                  for i, p in enumerate(pulls)]  # fmt: skip
        return parse_config(AgentConfig, {"capacity_bytes": "1GiB",
                                          "speculative_quota_bytes": "1MiB",
                                          "max_transfer_connections": connections,
                                          "tenant_tokens": tokens}, "agent.yaml")  # fmt: skip

    assert cfg(9, 4, 4).max_transfer_connections == 9
    assert cfg(1000, 300).tenant_tokens[0].max_pulls == 300  # past the default connections
    for connections, pulls in ((8, (4, 4)), (2, (4,)), (4, (4,))):
        with pytest.raises(ConfigError) as err:
            cfg(connections, *pulls)
        assert (f"the tenant tokens' max_pulls add up to {sum(pulls)}, not under "
                f"max_transfer_connections ({connections})") in str(err.value)  # fmt: skip


def test_an_agent_tenant_tokens_limits_default_to_none_but_four_pulls() -> None:
    from kvcast.serving.agent.config import AgentTenantToken

    token = AgentTenantToken(tenants=("acme",), token_env="KT_ACME")
    assert (token.max_bytes, token.max_pulls, token.max_requests_per_s, token.burst) == (
        None, 4, None, None
    )  # fmt: skip
    limited = AgentTenantToken(tenants=("acme",), token_env="KT_ACME", max_requests_per_s=2.5)
    assert limited.burst == 5
