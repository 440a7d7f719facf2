"""The ingest token on an agent: an engine reports its queue depth with it
(``POST /v1/engine-stats``, 204, shown in telemetry); every other guarded route (replicate,
evict, pin, unpin, hold, release, uploads, inventory, removals) is 403 to it before its body
is read, nothing done, counted in ``kvcast_agent_http_ingest_refusals_total`` (never as a
tenant token's refusal or a bad token); and the transfer server, which is never given it,
refuses a pull with it exactly as an unknown token's (``UNAUTHORIZED``, counted as a bad
token), over real loopback sockets."""

from __future__ import annotations

import time

import pytest
from agent_routes import DATA_ROUTES, UPLOAD

from kvcast.serving.agent import Agent, HostBuffer, checksum
from kvcast.serving.agent.api import INGEST_ROUTES
from kvcast.serving.agent.pull_result import PullStatus

SHARED, REPORTS = "agent-shared-token", "agent-ingest-token"
ADMIN = {"Authorization": f"Bearer {SHARED}"}
MINE = {"Authorization": f"Bearer {REPORTS}"}
# every guarded route but the ingest token's own (agent_routes lists them all: a test of the
# shared token checks that list against the app's schema)
REFUSED_ROUTES = [r for r in [*DATA_ROUTES, UPLOAD] if r not in INGEST_ROUTES]


def put_block(agent: Agent, tenant: str, h: int) -> None:
    buf = HostBuffer.from_bytes(b"kv" * 50)
    agent.store.put(tenant, h, buf, checksum(buf.view()))


def test_the_ingest_token_reports_an_engines_queue_depth(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, ingest_token=REPORTS) as (api, control):
            r = await api.post("/v1/engine-stats", json={"engine_id": "e0", "queue_depth": 9},
                               headers=MINE)  # fmt: skip
            assert r.status_code == 204, r.text
            assert (await api.get("/v1/telemetry")).json()["queue_depth"] == 9
            assert control.ingest_refusals == control.http_auth_failures == 0

    run(scenario())


@pytest.mark.parametrize(("method", "path"), REFUSED_ROUTES)
def test_the_ingest_token_is_403_on_every_other_data_route_and_nothing_is_done(
    run, metric, control_api, method: str, path: str
) -> None:
    async def scenario() -> None:
        async with control_api(token=SHARED, ingest_token=REPORTS) as (api, control):
            put_block(control.agent, "t", 1)
            body = {"tenant": "t", "block_hashes": [1], "claim_id": "r-1", "hold_s": 5.0,
                    "command_id": "c", "source": control.agent.address,
                    "deadline_s": 2.0}  # fmt: skip
            kwargs = {} if method == "GET" else {"json": body}
            store = control.agent.store
            before = (store.inventory(), store.totals())
            r = await api.request(method, path, headers=MINE, **kwargs)
            assert r.status_code == 403, r.text
            assert f"the ingest token may not use {method} {path}" in r.json()["detail"]
            assert "(POST /v1/engine-stats)" in r.json()["detail"]
            # nothing stored, moved, pinned, held or evicted: every block as it was
            assert (store.inventory(), store.totals()) == before
            assert control.replications_in_flight == 0
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_http_ingest_refusals_total") == 1
            assert metric(text, "kvcast_agent_http_tenant_refusals_total", reason="route") == 0
            assert metric(text, "kvcast_agent_auth_failures_total", surface="http") == 0
            # the shared token passes the guard (the handler answers: 2xx, or its own 4xx)
            r = await api.request(method, path, headers=ADMIN, **kwargs)
            assert r.status_code not in (401, 403), r.text

    run(scenario())


def test_a_pull_with_the_ingest_token_is_refused_as_an_unknown_tokens(
    run, config, fill_agent, metric, control_api
) -> None:
    """An agent whose token is the ingest token pulls from a source that knows it (its HTTP
    guard does): refused ``UNAUTHORIZED`` at its Hello, as a wrong token's pull, and counted
    as a bad token; the shared token's pull of the same block is served."""

    async def scenario() -> None:
        async with control_api(token=SHARED, ingest_token=REPORTS) as (api, control):
            src = control.agent
            fill_agent(src, "acme", {1: 4096})
            deadline = time.monotonic() + 5.0
            errors = []
            for token in (REPORTS, "a-wrong-token"):
                async with Agent(config(token=token, node_id="engine")) as puller:
                    got = await puller.pull(src.address, [1], "acme", deadline)
                    assert got.status is PullStatus.REFUSED and got.attempts == 1, got
                    assert puller.store.get("acme", 1) is None
                    errors.append(got.error)
            assert "UNAUTHORIZED" in errors[0] and errors[0] == errors[1]
            assert src.server.stats.auth_refused == 2 and src.server.stats.blocks_sent == 0
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_auth_failures_total", surface="transfer") == 2
            async with Agent(config(token=SHARED, node_id="peer")) as peer:
                got = await peer.pull(src.address, [1], "acme", deadline)
                assert got.status is PullStatus.OK, got

    run(scenario(), timeout=15.0)
