"""What a tenant token's arrivals may carry and change, on the sidecar's API served by uvicorn
on a real socket: never a node's queue depth (a node-level fact: a batch with one is refused
whole, 403 naming the field, nothing taken, counted as ``queue_depth``; the shared token's
are taken); a ``ts_ms`` ahead of the sidecar's clock is taken as the time received (the
shared token's is kept), so that no other tenant's events are moved ahead with it; and each
tenant token remembers its own request ids against retries, so that one posting ever new ids
pushes out only its own, never another token's or the shared token's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sidecar_harness import (
    AUTH,
    TOKEN,
    arrival,
    bearer,
    no_refusals,
    refusals,
    served,
    settle,
    sidecar_config,
)

ACME, GLOBEX = "arrivals-token-acme", "arrivals-token-globex"
TENANT_TOKENS = [
    {"tenants": ["acme"], "token_env": "KVCAST_TEST_ARRIVALS_ACME"},
    {"tenants": ["globex"], "token_env": "KVCAST_TEST_ARRIVALS_GLOBEX"},
]
NOW_MS = 1.8e12  # the sidecar's clock, stopped


@pytest.fixture
def tenant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for entry, token in zip(TENANT_TOKENS, (ACME, GLOBEX), strict=True):
        monkeypatch.setenv(entry["token_env"], token)


def config(tmp_path: Any) -> Any:
    return sidecar_config(tmp_path, token=TOKEN, tenant_tokens=TENANT_TOKENS)


async def taken_routed(sc: Any) -> list[Any]:
    """The (ts_ms, node, blocks) of the arrivals applied since the last call."""
    return await asyncio.wrap_future(sc.keeper.ask(lambda k: k.take_routed()))


def test_a_tenant_tokens_batch_with_a_queue_depth_is_refused_whole_naming_it_and_counted(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        async with served(config(tmp_path), clock_ms=lambda: NOW_MS) as (sc, client):
            ours, deep = arrival("r1", "acme", [1]), arrival("r2", "acme", [2])
            deep["queue_depth"] = 500  # would make node-a look busy for every tenant
            r = await client.post(
                "/v1/requests", json={"requests": [ours, deep]}, headers=bearer(ACME)
            )
            assert r.status_code == 403, r.text
            detail = r.json()["detail"]
            assert "body.requests.1.queue_depth" in detail and "shared token" in detail
            await settle(sc)
            assert sc.keeper.applied == 0 and sc.loads.router_queue == [None, None]
            assert await refusals(client) == no_refusals(queue_depth=1.0)
            r = await client.post("/v1/requests", json={"requests": [ours]}, headers=bearer(ACME))
            assert (r.json()["accepted"], r.json()["duplicates"]) == (1, 0)  # nothing remembered
            r = await client.post("/v1/requests", json={"requests": [deep]}, headers=AUTH)
            assert r.status_code == 202, r.text  # the router's report, with the shared token
            assert sc.loads.router_queue[0] is not None and sc.loads.router_queue[0][0] == 500

    run(main())


def test_a_tenant_tokens_arrival_stamped_ahead_is_taken_at_the_time_received(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        async with served(config(tmp_path), clock_ms=lambda: NOW_MS) as (sc, client):
            ahead = arrival("a1", "acme", [1]) | {"ts_ms": NOW_MS + 50_000}
            r = await client.post("/v1/requests", json={"requests": [ahead]}, headers=bearer(ACME))
            assert r.status_code == 202, r.text
            later = arrival("g1", "globex", [2]) | {"ts_ms": NOW_MS}
            r = await client.post(
                "/v1/requests", json={"requests": [later]}, headers=bearer(GLOBEX)
            )
            assert r.status_code == 202, r.text
            await settle(sc)
            routed = await taken_routed(sc)
            assert [ts for ts, _, _ in routed] == [NOW_MS, NOW_MS]
            assert sc.keeper.restamped == 0  # globex's arrival kept its own time
            # a router's clock far off is still refused, as it is to the shared token
            far = arrival("a2", "acme", [3]) | {"ts_ms": NOW_MS + 3_600_000}
            r = await client.post("/v1/requests", json={"requests": [far]}, headers=bearer(ACME))
            assert r.status_code == 422 and "ahead of the sidecar's clock" in r.text
            # the shared token's time is its own to give
            router = arrival("s1", "acme", [4]) | {"ts_ms": NOW_MS + 50_000}
            r = await client.post("/v1/requests", json={"requests": [router]}, headers=AUTH)
            assert r.status_code == 202, r.text
            await settle(sc)
            routed = await taken_routed(sc)
            assert [ts for ts, _, _ in routed] == [NOW_MS + 50_000]

    run(main())


def test_a_tenant_token_posting_new_ids_never_pushes_out_another_tokens_ids(
    tmp_path, run, tenant_env, monkeypatch
) -> None:
    import kvcast.serving.sidecar.core as core

    monkeypatch.setattr(core, "SEEN_REQUEST_IDS", 4)
    monkeypatch.setattr(core, "TENANT_TOKEN_REQUEST_IDS", 4, raising=False)  # (new here)

    async def main() -> None:
        async with served(config(tmp_path)) as (sc, client):

            async def post(token: str, *arrivals: dict[str, Any]) -> tuple[int, int]:
                r = await client.post(
                    "/v1/requests", json={"requests": list(arrivals)}, headers=bearer(token)
                )
                assert r.status_code == 202, r.text
                return r.json()["accepted"], r.json()["duplicates"]

            mine, routers = arrival("a-1", "acme", [1]), arrival("s-1", "acme", [2])
            assert await post(ACME, mine) == (1, 0)
            assert await post(TOKEN, routers) == (1, 0)
            flood = [arrival(f"g-{i}", "globex", [10 + i]) for i in range(10)]
            assert await post(GLOBEX, *flood) == (10, 0)
            # retries of acme's and the router's arrivals still count once
            assert await post(ACME, mine) == (0, 1)
            assert await post(TOKEN, routers) == (0, 1)
            # globex's own oldest ids are what its memory of 4 forgot
            assert await post(GLOBEX, flood[0]) == (1, 0)
            assert await post(GLOBEX, flood[9]) == (0, 1)
            await settle(sc)
            assert sc.keeper.applied == 1 + 1 + 10 + 1

    run(main())
