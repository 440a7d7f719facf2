"""Tenant tokens on an agent: a token that speaks for some tenants acts on those tenants' blocks
only. Over HTTP it may evict, release, upload (cached) and list them; a command naming another
tenant is refused whole with 403 (naming it) and nothing is done; the shared token's routes
(replicate, pin, unpin, hold, removals, engine-stats) and active uploads are 403, and its
uploads stop at its entry's max_bytes (409); its inventory shows its tenants' blocks only; its
evictions are in the removals log the sidecar reads (the shared token's are not); its command
ids are its own, in a log of its own that never pushes out the shared token's. Over the
transfer protocol (real loopback sockets) it pulls its tenants' blocks, byte-identical, and a
pull of another tenant's is refused (``UNAUTHORIZED``, naming the tenant) before any block is
read, and counted. An agent is handed exactly its config's tenant tokens; the CLI reads them
from their variables and refuses a bad one naming the variable, never the secret; a real
``kvcast serve agent`` process enforces them."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import time

import httpx
import pytest
import yaml
from serve_processes import AGENT_READY, start_agent
from typer.testing import CliRunner

from kvcast.serving.agent import Agent, HostBuffer, checksum
from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.pull_result import PullStatus

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


def test_a_tenant_token_acts_on_its_tenants_blocks(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            store = control.agent.store
            for h in (1, 2):
                put(control.agent, "acme", h)
            r = await api.put("/v1/blocks", json=upload_json("initech", 3), headers=TENANT)
            assert r.status_code == 200 and store.info("initech", 3).state.value == "cached"
            r = await api.put("/v1/blocks", **upload_raw("acme", 4))
            assert r.status_code == 200 and store.info("acme", 4) is not None
            r = await api.post("/v1/evict", json={"tenant": "acme", "block_hashes": [1]},
                               headers=TENANT)  # fmt: skip
            assert r.status_code == 200 and r.json()["evicted"] == [1]
            assert store.info("acme", 1) is None
            # the sidecar holds a speculative replica for a routed request; the tenant's
            # connector releases it once its engine has the block
            spec = HostBuffer.from_bytes(b"s" * 64)
            store.put("acme", 5, spec, checksum(spec.view()), state=BlockState.SPECULATIVE)
            hold = {"tenant": "acme", "block_hashes": [5], "claim_id": "r-1", "hold_s": 5.0}
            r = await api.post("/v1/hold", json=hold, headers=ADMIN)
            assert r.status_code == 200 and r.json()["held"] == [5]
            release = {"tenant": "acme", "block_hashes": [5], "claim_id": "r-1"}
            r = await api.post("/v1/release", json=release, headers=TENANT)
            assert r.status_code == 200 and r.json()["released"] == [5]
            assert (await api.get("/v1/inventory", headers=TENANT)).status_code == 200

    run(scenario())


FOREIGN = [
    ("POST", "/v1/evict", {"json": {"tenant": "globex", "block_hashes": [1]}}, "body.tenant"),
    ("POST", "/v1/release", {"json": {"tenant": "globex", "block_hashes": [1],
                                      "claim_id": "r"}}, "body.tenant"),
    ("GET", "/v1/inventory", {"params": {"tenant": "globex"}}, "query.tenant"),
    ("PUT", "/v1/blocks", {"json": upload_json("globex", 9)}, "body.tenant"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "kwargs", "where"), FOREIGN)
def test_a_command_naming_another_tenant_is_refused_403_and_nothing_is_done(
    run, control_api, metric, method, path, kwargs, where
) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            store = control.agent.store
            put(control.agent, "globex", 1)
            spec = HostBuffer.from_bytes(b"s" * 64)
            store.put("globex", 2, spec, checksum(spec.view()), state=BlockState.SPECULATIVE)
            before = sorted((i.tenant, i.block_hash, i.holds) for i in store.inventory())
            r = await api.request(method, path, **kwargs, headers=TENANT)
            assert r.status_code == 403, r.text
            detail = r.json()["detail"]
            assert f"{where}: this token may not act on blocks of tenant 'globex'" in detail
            assert "nothing was done" in detail and "s3cret" not in detail
            assert sorted((i.tenant, i.block_hash, i.holds) for i in store.inventory()) == before
            if method != "GET":
                command = {"/v1/blocks": "put_block"}.get(path, path.removeprefix("/v1/"))
                text = (await api.get("/metrics")).text
                labels = {"command": command, "reason": "forbidden"}
                assert metric(text, "kvcast_agent_commands_refused_total", **labels) == 1
            # the shared token may (every tenant)
            if path == "/v1/blocks":
                r = await api.put(path, json=upload_json("globex", 9), headers=ADMIN)
            else:
                r = await api.request(method, path, **kwargs, headers=ADMIN)
            assert r.status_code == 200, r.text

    run(scenario())


def test_a_raw_upload_for_another_tenant_is_refused_from_its_headers(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            r = await api.put("/v1/blocks", **upload_raw("globex", 9))
            assert r.status_code == 403
            assert "header.x-kvcast-tenant: this token may not act" in r.json()["detail"]
            assert len(control.agent.store) == 0

    run(scenario())


SHARED_ONLY = [
    ("POST", "/v1/replicate", {"command_id": "c", "source": "127.0.0.1:9", "tenant": "acme",
                               "block_hashes": [1], "deadline_s": 1.0}),
    ("POST", "/v1/pin", {"tenant": "acme", "block_hashes": [1]}),
    ("POST", "/v1/unpin", {"tenant": "acme", "block_hashes": [1]}),
    ("POST", "/v1/hold", {"tenant": "acme", "block_hashes": [1], "claim_id": "r",
                          "hold_s": 3600.0}),
    ("POST", "/v1/engine-stats", {"queue_depth": 1000}),
    ("GET", "/v1/removals", None),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body"), SHARED_ONLY)
def test_a_tenant_token_may_not_use_the_shared_tokens_routes(
    run, control_api, method, path, body
) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            put(control.agent, "acme", 1)
            r = await api.request(method, path, json=body, headers=TENANT)
            assert r.status_code == 403, r.text
            assert "a tenant token may not use" in r.json()["detail"]
            assert control.agent.store.info("acme", 1).pins == 0
            assert control.agent.store.info("acme", 1).holds == 0
            assert control.agent.client.stats.pulls == 0 and control.engines() == []
            assert control.http_auth_failures == 0  # known token: forbidden, not unauthorized

    run(scenario())


@pytest.mark.parametrize("form", ["json", "raw"])
def test_a_tenant_token_may_not_upload_an_active_block(run, control_api, form) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            if form == "json":
                r = await api.put("/v1/blocks", json=upload_json("acme", 1, "active"),
                                  headers=TENANT)  # fmt: skip
            else:
                r = await api.put("/v1/blocks", **upload_raw("acme", 1, "active"))
            assert r.status_code == 403
            assert "may upload cached blocks only, not 'active'" in r.json()["detail"]
            assert len(control.agent.store) == 0
            r = await api.put("/v1/blocks", json=upload_json("acme", 1, "active"), headers=ADMIN)
            assert r.status_code == 200 and control.agent.store.info("acme", 1).pins == 1

    run(scenario())


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
            await until_true(lambda: server._tenant_pulls[0] == 1)
            reader, writer = await hello(server.address, ACME)
            busy = await read_frame(reader)
            assert isinstance(busy, Error) and busy.code is ErrorCode.BUSY
            assert "this token has its 1 pulls at once" in busy.message
            writer.close()
            _, admin = await hello(server.address, SHARED)  # not a tenant token's pull
            first.close()
            await until_true(lambda: server._tenant_pulls[0] == 0)
            reader, writer = await hello(server.address, ACME)
            writer.write(encode(PullRequest("c", "acme", (7,))))
            assert isinstance(await read_frame(reader), Done)
            writer.close()
            admin.close()
            assert server.stats.tenant_busy_refused == 1
        finally:
            await server.stop()

    run(scenario(), timeout=10.0)


async def until_true(check) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never became true")


def test_a_tenant_tokens_inventory_shows_its_tenants_blocks_only(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            for tenant, h in (("acme", 1), ("globex", 2), ("initech", 3), ("globex", 4)):
                put(control.agent, tenant, h)

            async def listed(headers: dict, **params: str) -> set[tuple[str, int]]:
                r = await api.get("/v1/inventory", params=params, headers=headers)
                assert r.status_code == 200, r.text
                return {(b["tenant"], b["block_hash"]) for b in r.json()["blocks"]}

            assert await listed(TENANT) == {("acme", 1), ("initech", 3)}
            assert await listed(TENANT, tenant="initech") == {("initech", 3)}
            assert len(await listed(ADMIN)) == 4
            assert await listed(ADMIN, tenant="globex") == {("globex", 2), ("globex", 4)}

    run(scenario())


def test_a_tenant_tokens_command_ids_are_its_own(run, control_api) -> None:
    """The tenant token's ``c1`` does not block the shared token's ``c1`` (a different
    command: 409 if the ids were shared), and the shared token's ``c2`` is not replayed to the
    tenant token as a duplicate (it runs: the block is absent by then)."""

    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            for h in (1, 2, 3):
                put(control.agent, "acme", h)

            async def evict(headers: dict, h: int, command: str) -> dict:
                body = {"tenant": "acme", "block_hashes": [h], "command_id": command}
                r = await api.post("/v1/evict", json=body, headers=headers)
                assert r.status_code == 200, r.text
                return r.json()

            assert (await evict(TENANT, 1, "c1"))["evicted"] == [1]
            assert (await evict(ADMIN, 2, "c1"))["evicted"] == [2]
            assert (await evict(ADMIN, 3, "c2"))["evicted"] == [3]
            assert (await evict(TENANT, 3, "c2"))["absent"] == [3]
            assert (await evict(TENANT, 1, "c1"))["evicted"] == [1]  # its own retry: a replay

    run(scenario())


def test_a_tenant_tokens_evictions_are_logged_for_the_sidecar(run, control_api) -> None:
    """The sidecar did not order them, so it reads them in ``GET /v1/removals`` (and drops the
    replica from its view); its own evictions are not logged."""

    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            store = control.agent.store
            for h in (1, 2):
                spec = HostBuffer.from_bytes(bytes([h]) * 64)
                store.put("acme", h, spec, checksum(spec.view()), state=BlockState.SPECULATIVE)
            for headers, h in ((ADMIN, 1), (TENANT, 2)):
                body = {"tenant": "acme", "block_hashes": [h]}
                r = await api.post("/v1/evict", json=body, headers=headers)
                assert r.json()["evicted"] == [h]
            removed = (await api.get("/v1/removals", headers=ADMIN)).json()["blocks"]
            assert [(b["tenant"], b["block_hash"], b["reason"]) for b in removed] == [
                ("acme", 2, "evicted_by_tenant")
            ]  # fmt: skip
            assert (await api.get("/v1/telemetry")).json()["removals_next"] == 1

    run(scenario())


def test_a_tenant_token_cannot_push_the_shared_tokens_commands_out_of_memory(
    run, control_api
) -> None:
    """More new command ids from a tenant token than its log keeps: the shared token's retry of
    its pin is still a no-op (one pin), and the tenant token's oldest ids are forgotten."""
    from kvcast.serving.agent.control import SCOPED_COMMANDS

    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            put(control.agent, "globex", 1)
            pin = {"tenant": "globex", "block_hashes": [1], "command_id": "pin-7"}
            assert (await api.post("/v1/pin", json=pin, headers=ADMIN)).status_code == 200
            for i in range(SCOPED_COMMANDS + 8):
                body = {"tenant": "acme", "block_hashes": [99], "command_id": f"e-{i}"}
                r = await api.post("/v1/evict", json=body, headers=TENANT)
                assert r.json()["absent"] == [99]
            r = await api.post("/v1/pin", json=pin, headers=ADMIN)
            assert r.status_code == 200 and control.agent.store.info("globex", 1).pins == 1
            put(control.agent, "acme", 99)
            body = {"tenant": "acme", "block_hashes": [99], "command_id": "e-0"}
            r = await api.post("/v1/evict", json=body, headers=TENANT)
            assert r.json()["evicted"] == [99]  # forgotten: runs again
            body["command_id"] = f"e-{SCOPED_COMMANDS + 7}"
            put(control.agent, "acme", 99)
            r = await api.post("/v1/evict", json=body, headers=TENANT)
            assert r.json()["absent"] == [99]  # remembered: its outcome, nothing moved
            assert control.agent.store.info("acme", 99) is not None

    run(scenario(), timeout=20.0)


def test_a_tenant_token_pulls_its_tenants_blocks_and_is_refused_anothers(
    run, config, fill_agent, metric, control_api
) -> None:
    """A KV connector (here an agent whose token is the acme tenant token) pulls acme blocks
    byte-identical from a source over real loopback TCP; a pull of globex blocks is refused,
    naming the tenant, before any block is read, and counted; the shared token pulls both."""

    async def scenario() -> None:
        async with control_api(token=SHARED, tenant_tokens=TOKENS) as (api, control):
            src = control.agent
            acme = fill_agent(src, "acme", {1: 4096, 2: 8192})
            fill_agent(src, "globex", {3: 4096})
            deadline = time.monotonic() + 5.0
            async with Agent(config(token=ACME, node_id="connector")) as connector:
                ok = await connector.pull(src.address, [1, 2], "acme", deadline)
                assert ok.status is PullStatus.OK, ok
                for h, data in acme.items():
                    assert bytes(connector.store.get("acme", h).buffer.view()) == data
                refused = await connector.pull(src.address, [3], "globex", deadline)
                assert refused.status is PullStatus.REFUSED and refused.attempts == 1
                assert "UNAUTHORIZED" in refused.error and "'globex'" in refused.error
                assert connector.store.get("globex", 3) is None
            stats = src.server.stats
            assert stats.tenant_refused == 1 and stats.auth_refused == 0
            assert stats.blocks_sent == 2
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_transfer_tenant_refusals_total") == 1
            async with Agent(config(token=SHARED, node_id="peer")) as peer:
                got = await peer.pull(src.address, [3], "globex", deadline)
                assert got.status is PullStatus.OK, got

    run(scenario(), timeout=15.0)


def test_an_agent_is_given_exactly_its_configs_tenant_tokens(config) -> None:
    cfg = config(token=SHARED, tenant_tokens=[{"tenants": ["acme", "initech"],
                                                "token_env": "KT_ACME"}])  # fmt: skip
    assert Agent(cfg, tenant_tokens=TOKENS).tenant_tokens == TOKENS
    for wrong in (None, {ACME: frozenset({"acme"})}, {**TOKENS, "x": frozenset({"y"})}):
        with pytest.raises(ValueError, match="do not match the config's 1 tenant_tokens"):
            Agent(cfg, tenant_tokens=wrong)
    with pytest.raises(ValueError, match="tenant tokens need a shared token"):
        Agent(config(tenant_tokens=cfg.model_dump()["tenant_tokens"]), tenant_tokens=TOKENS)


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


BASE = ["serve", "agent", "--listen", "127.0.0.1:0", "--transfer-listen", "127.0.0.1:0",
        "--capacity", "64MiB", "--speculative-quota", "8MiB"]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KVCAST_TOKEN": SHARED}, "tenant_tokens[0]: its token_env KT_ACME is not set"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": " "}, "its token_env KT_ACME is empty"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": SHARED},
         "tenant_tokens[0] (KT_ACME): its token is the shared token"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": "s3cret" * 400},
         "tenant_tokens[0] (KT_ACME): its token is 2400 bytes (UTF-8), over 2048"),
        ({"KT_ACME": ACME}, "tenant_tokens need a shared token"),
    ],
)  # fmt: skip
def test_the_cli_refuses_a_bad_tenant_token_naming_its_variable_never_the_secret(
    tmp_path, env, message
) -> None:
    from kvcast.cli.app import app

    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"tenant_tokens": [{"tenants": ["acme"],
                                                        "token_env": "KT_ACME"}]}))  # fmt: skip
    full = {"KVCAST_TOKEN": None, "KT_ACME": None} | env
    r = CliRunner().invoke(app, [*BASE, "--config", str(path)], env=full)  # type: ignore[arg-type]
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()), r.output
    assert "s3cret" not in r.output and "Traceback" not in r.output


def test_a_real_agent_process_enforces_its_tenant_tokens(tmp_path) -> None:
    shared, acme = secrets.token_hex(16), secrets.token_hex(16)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"tenant_tokens": [{"tenants": ["acme"],
                                                        "token_env": "KT_ACME"}]}))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("KVCAST_TOKEN", "KT_ACME")}
    env |= {"KVCAST_TOKEN": shared, "KT_ACME": acme}
    seed = ["--seed-blocks", "3", "--seed-tenant", "acme", "--seed-block-bytes", "4096"]
    agent = start_agent("node-a", env, "--config", str(path), *seed)
    try:
        agent.wait_ready(AGENT_READY)
        base, mine = agent.http, {"Authorization": f"Bearer {acme}"}
        with httpx.Client(timeout=10.0) as http:
            r = http.get(f"{base}/v1/inventory", headers=mine)
            assert r.status_code == 200 and len(r.json()["blocks"]) == 3
            assert {b["tenant"] for b in r.json()["blocks"]} == {"acme"}
            h = r.json()["blocks"][0]["block_hash"]
            r = http.post(f"{base}/v1/pin", json={"tenant": "acme", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 403
            r = http.post(f"{base}/v1/evict", json={"tenant": "globex", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 403 and "'globex'" in r.json()["detail"]
            r = http.post(f"{base}/v1/evict", json={"tenant": "acme", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 200 and r.json()["evicted"] == [h]
            r = http.get(f"{base}/v1/inventory", headers={"Authorization": "Bearer nope"})
            assert r.status_code == 401
        assert "tenant tokens: 1, for tenants ['acme']" in "".join(agent.log)
        assert acme not in "".join(agent.log) and shared not in "".join(agent.log)
    finally:
        agent.kill()
