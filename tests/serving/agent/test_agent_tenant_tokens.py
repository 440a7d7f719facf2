"""Tenant tokens on an agent, what they may do: a token that speaks for some tenants acts on
those tenants' blocks only. Over HTTP it may evict, release, upload (cached) and list them; a
command naming another tenant is refused whole with 403 (naming it) and nothing is done; the
shared token's routes (replicate, pin, unpin, hold, removals, engine-stats) and active uploads
are 403; its inventory shows its tenants' blocks only; its evictions are in the removals log
the sidecar reads (the shared token's are not); its command ids are its own, in a log of its
own that never pushes out the shared token's. Over the transfer protocol (real loopback
sockets) it pulls its tenants' blocks, byte-identical, and a pull of another tenant's is
refused (``UNAUTHORIZED``, naming the tenant) before any block is read, and counted."""

from __future__ import annotations

import time

import pytest
from tenant_token_helpers import ACME, ADMIN, SHARED, TENANT, TOKENS, put, upload_json, upload_raw

from kvcast.serving.agent import Agent, HostBuffer, checksum
from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.pull_result import PullStatus


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
            text = (await api.get("/metrics")).text
            refusals = "kvcast_agent_http_tenant_refusals_total"
            assert metric(text, refusals, reason="tenant") == 1  # inventory's query too
            assert metric(text, refusals, reason="route") == 0
            if method != "GET":
                command = {"/v1/blocks": "put_block"}.get(path, path.removeprefix("/v1/"))
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
    run, control_api, metric, method, path, body
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
            text = (await api.get("/metrics")).text  # counted, removals' GET included
            assert metric(text, "kvcast_agent_http_tenant_refusals_total", reason="route") == 1
            assert metric(text, "kvcast_agent_http_tenant_refusals_total", reason="tenant") == 0

    run(scenario())


@pytest.mark.parametrize("form", ["json", "raw"])
def test_a_tenant_token_may_not_upload_an_active_block(run, control_api, metric, form) -> None:
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
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_http_tenant_refusals_total", reason="state") == 1
            r = await api.put("/v1/blocks", json=upload_json("acme", 1, "active"), headers=ADMIN)
            assert r.status_code == 200 and control.agent.store.info("acme", 1).pins == 1

    run(scenario())


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
