"""Tenant tokens on the sidecar's API, served by uvicorn on a real socket: a tenant token posts
its tenants' arrivals only (a batch with another tenant's is refused whole, 403 naming it,
nothing ingested, counted), sees only its tenants' decisions (never an eviction), blocks and
replicas (a public prefix only once its tenants sent it; tenants told apart by exact name,
not by the model's crc32 tenant code; a block named longest ago forgotten past
max_tracked_blocks), is 403 on every other guarded route, and an unknown token stays 401;
the shared token keeps every right; one tenant's request id never makes another tenant's
arrival a repeat; the OpenAPI schema documents it."""

from __future__ import annotations

from typing import Any

import pytest
from sidecar_harness import (
    AUTH,
    TOKEN,
    arrival,
    bearer,
    chain,
    hot_chain_on_node_a,
    make_sidecar,
    no_refusals,
    refusals,
    served,
    settle,
    sidecar_config,
    telemetry,
    tenant_secrets,
    tick,
)

ACME, GLOBEX, BOTH = "tenant-token-acme", "tenant-token-globex", "tenant-token-both"
TENANT_TOKENS = [
    {"tenants": ["acme"], "token_env": "KVCAST_TEST_TOKEN_ACME"},
    {"tenants": ["globex"], "token_env": "KVCAST_TEST_TOKEN_GLOBEX"},
    {"tenants": ["acme", "globex"], "token_env": "KVCAST_TEST_TOKEN_BOTH"},
]


@pytest.fixture
def tenant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for entry, token in zip(TENANT_TOKENS, (ACME, GLOBEX, BOTH), strict=True):
        monkeypatch.setenv(entry["token_env"], token)


def test_a_tenant_token_posts_its_tenants_arrivals_and_they_are_ingested(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            batch = {"requests": [arrival("r1", "acme", [1, 2]), arrival("r2", "acme", [3])]}
            r = await client.post("/v1/requests", json=batch, headers=bearer(ACME))
            assert r.status_code == 202 and r.json()["accepted"] == 2, r.text
            mixed = {"requests": [arrival("r3", "acme", [4]), arrival("r4", "globex", [5])]}
            r = await client.post("/v1/requests", json=mixed, headers=bearer(BOTH))
            assert r.status_code == 202 and r.json()["accepted"] == 2, r.text
            await settle(sc)
            assert sc.keeper.applied == 4

    run(main())


def test_a_batch_with_another_tenants_arrival_is_refused_whole_naming_it_and_counted(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            ours, theirs = arrival("r1", "acme", [1, 2]), arrival("r2", "globex", [3, 4])
            r = await client.post(
                "/v1/requests", json={"requests": [ours, theirs]}, headers=bearer(ACME)
            )
            assert r.status_code == 403, r.text
            detail = r.json()["detail"]
            assert "'globex'" in detail and "body.requests.1.tenant" in detail
            await settle(sc)
            assert sc.keeper.applied == 0 and sc.queue.accepted["http"] == 0
            assert len(sc.keeper.routed) == len(sc.chains) == 0
            assert await refusals(client) == no_refusals(tenant=1.0)
            # nothing of the refused batch was remembered: its own arrival is not a repeat
            r = await client.post("/v1/requests", json={"requests": [ours]}, headers=bearer(ACME))
            assert (r.json()["accepted"], r.json()["duplicates"]) == (1, 0)

    run(main())


def test_a_tenant_token_is_403_on_every_other_guarded_route_and_changes_nothing(
    tmp_path, run, tenant_env, model_path
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            kv = {"node": "node-a", "events": [{"type": "BlockStored", "block_hashes": [9],
                                                "block_size": 16}]}  # fmt: skip
            posts = [("/v1/kv-events", kv), ("/v1/mode", {"mode": "active"}),
                     ("/v1/model", {"source": str(model_path)})]  # fmt: skip
            for path, body in posts:
                for token in (ACME, BOTH):
                    r = await client.post(path, json=body, headers=bearer(token))
                    assert r.status_code == 403, (path, r.text)
                    assert "shared token" in r.json()["detail"]
            await settle(sc)
            assert sc.mode == "shadow" and sc.slot.current is None and sc.keeper.applied == 0
            assert sc.auth_failures == 0
            assert await refusals(client) == no_refusals(route=6.0)
            # the open GET routes stay open to it, as to anyone; the model's (its source is
            # a path on the sidecar's host) is the shared token's
            for path in ("/v1/mode", "/healthz", "/metrics"):
                assert (await client.get(path, headers=bearer(ACME))).status_code == 200
            assert (await client.get("/v1/model", headers=bearer(ACME))).status_code == 403

    run(main())


def test_an_unknown_token_stays_401_and_the_shared_token_keeps_every_right(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            batch = {"requests": [arrival("r1", "acme", [1]), arrival("r2", "initech", [2])]}
            for headers in ({}, bearer("wrong"), bearer(ACME + "x"), {"Authorization": ACME}):
                for method, path in (("POST", "/v1/requests"), ("GET", "/v1/blocks/1"),
                                     ("GET", "/v1/decisions"), ("POST", "/v1/mode")):  # fmt: skip
                    body = batch if path == "/v1/requests" else {"mode": "active"}
                    r = await client.request(method, path, json=body, headers=headers)
                    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert sc.auth_failures == 16
            r = await client.post("/v1/requests", json=batch, headers=AUTH)  # any tenant
            assert r.status_code == 202 and r.json()["accepted"] == 2
            kv = {"node": 0, "events": [{"type": "AllBlocksCleared"}]}
            assert (await client.post("/v1/kv-events", json=kv, headers=AUTH)).status_code == 202
            r = await client.post("/v1/mode", json={"mode": "active"}, headers=AUTH)
            assert r.status_code == 200 and sc.mode == "active"
            assert await refusals(client) == no_refusals()

    run(main())


class WallClock:
    """The sidecar's wall clock (ms), moved by the test."""

    def __init__(self) -> None:
        self.now = 1.8e12

    def __call__(self) -> float:
        return self.now


def test_decisions_show_a_tenant_token_only_its_tenants_chains_never_an_eviction(
    tmp_path, run, tenant_env, model_path
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS,
                             model=str(model_path))  # fmt: skip
        clock = WallClock()
        async with served(cfg, clock_ms=clock) as (sc, client):
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            await hot_chain_on_node_a(client, chain(1), tenant="acme")
            await hot_chain_on_node_a(client, chain(2), tenant="globex")
            await settle(sc)
            made = await tick(sc)
            assert sorted(d.tenant for d in made) == ["acme", "globex"]

            async def seen(token: str, **params: Any) -> tuple[int, list[str]]:
                r = await client.get("/v1/decisions", params=params, headers=bearer(token))
                assert r.status_code == 200, r.text
                body = r.json()
                return body["total"], [d["tenant"] for d in body["decisions"]]

            assert await seen(ACME) == (1, ["acme"])
            assert await seen(GLOBEX) == (1, ["globex"])
            assert await seen(GLOBEX, kind="replicate", limit=1) == (1, ["globex"])
            assert await seen(ACME, kind="evict") == (1, [])
            total, tenants = await seen(BOTH)
            assert total == 2 and sorted(tenants) == ["acme", "globex"]
            total, tenants = await seen(TOKEN)
            assert total == 2 and sorted(tenants) == ["acme", "globex"]
            r = await client.get("/v1/decisions", params={"limit": 1}, headers=bearer(BOTH))
            assert r.json()["total"] == 2 and len(r.json()["decisions"]) == 1
            # the replicas' TTL passes: the next tick evicts them (an eviction names no tenant)
            clock.now += max(d.ttl_ms for d in made) + 1.0
            evicted = [d for d in await tick(sc) if d.kind == "evict"]
            assert evicted and all(d.tenant == "" for d in evicted)
            _, shown = await seen(TOKEN, kind="evict")
            assert shown == [""] * len(evicted)  # the shared token sees every eviction
            for token in (ACME, GLOBEX, BOTH):
                total, tenants = await seen(token)
                assert tenants and "" not in tenants and len(tenants) == total
                assert await seen(token, kind="evict") == (total, [])

    run(main())


def test_a_block_lookup_shows_a_tenant_token_only_its_tenants_blocks_and_replicas(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [11, 12, 13, 14], "block_size": 16}
            r = await client.post("/v1/kv-events", json={"node": "node-a", "events": [stored]},
                                  headers=AUTH)  # fmt: skip
            assert r.status_code == 202
            both = {
                "requests": [arrival("a1", "acme", [11, 13]), arrival("g1", "globex", [12, 13])]
            }
            assert (await client.post("/v1/requests", json=both, headers=AUTH)).status_code == 202
            await settle(sc)
            sc.replicas.place(1, [13], "acme", 4096, ttl_s=600.0)  # as the executor does
            sc.replicas.place(0, [13], "globex", 4096, ttl_s=600.0)
            sc.replicas.place(1, [15], "acme", 4096, ttl_s=600.0)  # a replica no request named

            async def where(token: str, block: int) -> tuple[int, Any]:
                r = await client.get(f"/v1/blocks/{block}", headers=bearer(token))
                return r.status_code, r.json()

            def located(block: int, replicas: list[str]) -> tuple[int, Any]:
                return 200, {"block_hash": block, "gpu": ["node-a"], "lower": [],
                             "replicas": replicas}  # fmt: skip

            assert await where(ACME, 11) == located(11, [])
            assert await where(GLOBEX, 12) == located(12, [])
            assert await where(ACME, 13) == located(13, ["node-b"])  # acme's replica only
            assert await where(GLOBEX, 13) == located(13, ["node-a"])
            assert await where(BOTH, 13) == located(13, ["node-a", "node-b"])
            assert await where(TOKEN, 13) == located(13, ["node-a", "node-b"])
            assert await where(ACME, 15) == (200, {"block_hash": 15, "gpu": [], "lower": [],
                                                   "replicas": ["node-b"]})  # fmt: skip
            # another tenant's block reads as an unknown one: held or not, nothing is told
            hidden, unknown = await where(ACME, 12), await where(ACME, 99)
            assert hidden[0] == unknown[0] == 404
            assert hidden[1]["detail"].replace("12", "99") == unknown[1]["detail"]
            assert (await where(ACME, 14))[0] == 404 and (await where(GLOBEX, 15))[0] == 404
            assert await where(TOKEN, 12) == located(12, [])
            assert await where(TOKEN, 14) == located(14, [])

    run(main())


def test_a_public_prefix_is_shown_to_a_tenant_token_only_once_its_tenants_sent_it(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [21, 22, 23], "block_size": 16}
            await client.post("/v1/kv-events", json={"node": "node-b", "events": [stored]},
                              headers=AUTH)  # fmt: skip
            system = {"requests": [arrival("g1", "globex", [21, 22, 23], public=2)]}
            r = await client.post("/v1/requests", json=system, headers=bearer(GLOBEX))
            assert r.status_code == 202
            await settle(sc)
            r = await client.get("/v1/blocks/21", headers=bearer(ACME))
            assert r.status_code == 404
            mine = {"requests": [arrival("a1", "acme", [21, 22, 31], public=2)]}
            assert (
                await client.post("/v1/requests", json=mine, headers=bearer(ACME))
            ).status_code == 202
            await settle(sc)
            r = await client.get("/v1/blocks/21", headers=bearer(ACME))
            assert r.status_code == 200 and r.json()["gpu"] == ["node-b"]
            assert (await client.get("/v1/blocks/23", headers=bearer(ACME))).status_code == 404

    run(main())


def test_a_tenant_token_never_sees_a_block_of_a_tenant_whose_name_shares_its_crc32(
    tmp_path, run, monkeypatch
) -> None:
    """The feature model's tenant code is crc32 of the name; lookups go by exact names."""
    twins = ("org-fqb17i228u", "org-hh578ntdii")  # crc32 2684583092, both
    tokens = [{"tenants": [t], "token_env": f"KVCAST_TEST_TWIN_{i}"} for i, t in enumerate(twins)]
    for i in range(2):
        monkeypatch.setenv(f"KVCAST_TEST_TWIN_{i}", f"twin-token-{i}")

    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=tokens)
        async with served(cfg) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [41, 42], "block_size": 16}
            r = await client.post("/v1/kv-events", json={"node": "node-a", "events": [stored]},
                                  headers=AUTH)  # fmt: skip
            assert r.status_code == 202
            first = {"requests": [arrival("t0", twins[0], [41, 42])]}
            r = await client.post("/v1/requests", json=first, headers=bearer("twin-token-0"))
            assert r.status_code == 202, r.text
            await settle(sc)
            for block in (41, 42):
                r = await client.get(f"/v1/blocks/{block}", headers=bearer("twin-token-0"))
                assert r.status_code == 200 and r.json()["gpu"] == ["node-a"]
                r = await client.get(f"/v1/blocks/{block}", headers=bearer("twin-token-1"))
                assert r.status_code == 404, r.text

    run(main())


def test_a_block_named_longest_ago_is_forgotten_past_max_tracked_blocks_404_to_a_tenant_token(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS,
                             max_tracked_blocks=2)  # fmt: skip
        async with served(cfg) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [51, 52, 53], "block_size": 16}
            r = await client.post("/v1/kv-events", json={"node": "node-a", "events": [stored]},
                                  headers=AUTH)  # fmt: skip
            assert r.status_code == 202
            for rid, block in (("a1", 51), ("a2", 52), ("a3", 53)):
                one = {"requests": [arrival(rid, "acme", [block])]}
                r = await client.post("/v1/requests", json=one, headers=bearer(ACME))
                assert r.status_code == 202, r.text
            await settle(sc)

            async def status(token: str, block: int) -> int:
                return (await client.get(f"/v1/blocks/{block}", headers=bearer(token))).status_code

            assert [await status(ACME, b) for b in (51, 52, 53)] == [404, 200, 200]
            assert sc.block_tenants is not None and len(sc.block_tenants) == 2
            again = {"requests": [arrival("a4", "acme", [51])]}  # named again: known again
            assert (await client.post("/v1/requests", json=again, headers=AUTH)).status_code == 202
            assert [await status(ACME, b) for b in (51, 52, 53)] == [200, 404, 200]

    run(main())


def test_one_tenants_request_id_never_makes_another_tenants_arrival_a_repeat(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
        async with served(cfg) as (sc, client):
            first = {"requests": [arrival("req-7", "acme", [1, 2])]}
            r = await client.post("/v1/requests", json=first, headers=bearer(ACME))
            assert r.json()["accepted"] == 1
            same_id = {"requests": [arrival("req-7", "globex", [3, 4])]}
            r = await client.post("/v1/requests", json=same_id, headers=bearer(GLOBEX))
            assert (r.json()["accepted"], r.json()["duplicates"]) == (1, 0)
            r = await client.post("/v1/requests", json=same_id, headers=bearer(GLOBEX))
            assert (r.json()["accepted"], r.json()["duplicates"]) == (0, 1)  # a retry still is
            await settle(sc)
            assert sc.keeper.applied == 2

    run(main())


def test_an_empty_tenant_tokens_list_leaves_the_shared_token_alone_in_charge(
    tmp_path, run, monkeypatch
) -> None:
    """The shipped default (``tenant_tokens: []``): one token, every right, as before."""

    async def main() -> None:
        cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=[])
        assert tenant_secrets(cfg) == {}
        async with served(cfg) as (sc, client):
            batch = {"requests": [arrival("r1", "acme", [1]), arrival("r2", "globex", [1])]}
            assert (await client.post("/v1/requests", json=batch, headers=AUTH)).status_code == 202
            await settle(sc)
            assert (await client.get("/v1/blocks/1", headers=AUTH)).status_code == 404  # not held
            r = await client.post("/v1/mode", json={"mode": "active"}, headers=AUTH)
            assert r.status_code == 200
            r = await client.post("/v1/requests", json=batch, headers=bearer(ACME))
            assert r.status_code == 401 and sc.auth_failures == 1
            assert await refusals(client) == no_refusals()

    monkeypatch.setenv("KVCAST_TEST_TOKEN_ACME", ACME)  # set, but no entry names it
    run(main())


def test_the_openapi_schema_documents_tenant_tokens_and_their_403s(tmp_path, tenant_env) -> None:
    from kvcast.serving.sidecar.api import build_app

    cfg = sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)
    schema = build_app(make_sidecar(cfg)).openapi()
    (scheme,) = schema["components"]["securitySchemes"].values()
    assert "tenant token" in scheme["description"] and "403" in scheme["description"]
    for path in ("/v1/requests", "/v1/kv-events", "/v1/mode", "/v1/model"):
        assert "403" in schema["paths"][path]["post"]["responses"], path
    for path in ("/v1/decisions", "/v1/blocks/{block_hash}"):
        assert "tenant token" in schema["paths"][path]["get"]["description"], path
