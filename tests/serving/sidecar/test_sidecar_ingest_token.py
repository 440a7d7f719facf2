"""The ingest token on the sidecar's API, served by uvicorn on a real socket: it posts any
tenant's arrivals (queue depths and clocks ahead included, never rate- or queue-share-limited:
as the shared token) and KV events, which are ingested; every other guarded route (mode,
model, decisions, block lookups) is 403 to it naming the route, changes nothing and is counted
in ``kvcast_sidecar_ingest_refusals_total`` (never as a tenant token's refusal or a bad
token); a near miss of it is 401; the OpenAPI schema documents it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sidecar_harness import (
    TOKEN,
    arrival,
    bearer,
    no_refusals,
    refusals,
    served,
    settle,
    sidecar_config,
)

REPORTS = "sidecar-ingest-token"
ACME = "sidecar-ingest-test-acme"
SLOW_ACME = [{"tenants": ["acme"], "token_env": "KVCAST_TEST_INGEST_ACME",
              "max_arrivals_per_s": 1, "burst_arrivals": 1, "max_queue_share": 0.001}]  # fmt: skip
NOW_MS = 1.8e12  # the sidecar's clock, stopped


@pytest.fixture
def acme_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCAST_TEST_INGEST_ACME", ACME)


def config(tmp_path: Any) -> Any:
    """Shared, ingest and a tenant token limited to one arrival a second."""
    return sidecar_config(tmp_path, token=TOKEN, ingest_token=REPORTS, tenant_tokens=SLOW_ACME)


async def ingest_refusals(client: Any) -> float:
    from kvcast.serving.cluster.summary import parse_metrics

    metrics = parse_metrics((await client.get("/metrics")).text)
    return metrics["kvcast_sidecar_ingest_refusals_total"]


def test_the_ingest_token_posts_any_tenants_arrivals_and_kv_events_unlimited(
    tmp_path, run, acme_env
) -> None:
    async def main() -> None:
        async with served(config(tmp_path), clock_ms=lambda: NOW_MS) as (sc, client):
            batch = [arrival(f"r{i}", ("acme", "globex")[i % 2], [i + 1]) for i in range(20)]
            batch[0] |= {"queue_depth": 7}  # the router's report of node a's queue
            batch[-1] |= {"ts_ms": NOW_MS + 5_000}  # the router's clock ahead: kept
            r = await client.post("/v1/requests", json={"requests": batch}, headers=bearer(REPORTS))
            assert r.status_code == 202 and r.json()["accepted"] == 20, r.text
            # the tenant token's limit (one a second, a tiny queue share) is not the ingest's
            two = [arrival("a1", "acme", [50]), arrival("a2", "acme", [51])]
            r = await client.post("/v1/requests", json={"requests": two}, headers=bearer(ACME))
            assert r.status_code == 400, r.text  # its burst is one arrival
            kv = {"node": "node-b", "events": [{"type": "BlockStored", "block_hashes": [99],
                                                "block_size": 16}]}  # fmt: skip
            r = await client.post("/v1/kv-events", json=kv, headers=bearer(REPORTS))
            assert r.status_code == 202 and r.json()["accepted"] == 1, r.text
            await settle(sc)
            assert sc.keeper.applied == 21
            assert sc.loads.router_queue[0] is not None and sc.loads.router_queue[0][0] == 7
            routed = await asyncio.wrap_future(sc.keeper.ask(lambda k: k.take_routed()))
            assert routed[-1][0] == NOW_MS + 5_000  # as the shared token's, not restamped
            assert await refusals(client) == no_refusals(burst=1.0)
            assert await ingest_refusals(client) == 0 and sc.auth_failures == 0

    run(main())


def test_the_ingest_token_is_403_on_every_other_guarded_route_and_changes_nothing(
    tmp_path, run, acme_env, model_path
) -> None:
    async def main() -> None:
        async with served(config(tmp_path)) as (sc, client):
            calls = [("POST", "/v1/mode", {"mode": "active"}),
                     ("POST", "/v1/model", {"source": str(model_path)}),
                     ("GET", "/v1/model", None), ("GET", "/v1/decisions", None),
                     ("GET", "/v1/blocks/7", None)]  # fmt: skip
            for method, path, body in calls:
                r = await client.request(method, path, json=body, headers=bearer(REPORTS))
                assert r.status_code == 403, (path, r.text)
                detail = r.json()["detail"]
                assert f"the ingest token may not use {method} {path}" in detail, detail
                assert "(POST /v1/kv-events, POST /v1/requests)" in detail, detail
            assert sc.mode == "shadow" and sc.slot.current is None
            assert await ingest_refusals(client) == len(calls)
            assert await refusals(client) == no_refusals() and sc.auth_failures == 0
            # the open routes stay open to it, as to anyone
            for path in ("/v1/mode", "/healthz", "/metrics"):
                assert (await client.get(path, headers=bearer(REPORTS))).status_code == 200
            # a near miss of it is no token: 401, counted as such
            r = await client.post("/v1/requests", json={"requests": []},
                                  headers=bearer(REPORTS + "x"))  # fmt: skip
            assert r.status_code == 401 and sc.auth_failures == 1
            assert await ingest_refusals(client) == len(calls)

    run(main())


def test_the_openapi_schema_documents_the_ingest_token(tmp_path, run, acme_env) -> None:
    async def main() -> None:
        async with served(config(tmp_path)) as (_, client):
            schema = (await client.get("/openapi.json")).json()
            bearer_doc = schema["components"]["securitySchemes"]["HTTPBearer"]["description"]
            assert "ingest token (KVCAST_INGEST_TOKEN" in bearer_doc
            assert "POST /v1/kv-events only" in bearer_doc

    run(main())
