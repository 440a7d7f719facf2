"""Arrival rates per tenant token, on the sidecar's API served by uvicorn on a real socket: an
entry's ``max_arrivals_per_s`` (bursts up to ``burst_arrivals``) is counted in arrivals; a
batch that does not fit is refused whole (429, ``Retry-After`` the seconds until it would,
rounded up), nothing ingested or remembered, counted; the budget refills with time; a batch
over the burst is refused with 400 asking to split it; a batch refused for another reason
(422, 403) takes none of the budget; each entry has its own budget, and entries without a
rate and the shared token are never limited; the OpenAPI schema documents the 429 and its
header."""

from __future__ import annotations

from typing import Any

import pytest
from sidecar_harness import (
    AUTH,
    TOKEN,
    arrival,
    bearer,
    make_sidecar,
    no_refusals,
    refusals,
    served,
    settle,
    sidecar_config,
)

ACME, GLOBEX, BOTH = "rate-token-acme", "rate-token-globex", "rate-token-both"
ENVS = ("KVCAST_TEST_RATE_ACME", "KVCAST_TEST_RATE_GLOBEX", "KVCAST_TEST_RATE_BOTH")


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tenant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for env, token in zip(ENVS, (ACME, GLOBEX, BOTH), strict=True):
        monkeypatch.setenv(env, token)


def config(tmp_path: Any, acme: dict[str, Any], globex: dict[str, Any] | None = None) -> Any:
    """acme's and globex's tokens with these limits; a third, unlimited, for both tenants."""
    tokens = [
        {"tenants": ["acme"], "token_env": ENVS[0], **acme},
        {"tenants": ["globex"], "token_env": ENVS[1], **(globex or {})},
        {"tenants": ["acme", "globex"], "token_env": ENVS[2]},
    ]
    return sidecar_config(tmp_path, token=TOKEN, tenant_tokens=tokens)


def batch(prefix: str, n: int, tenant: str = "acme") -> dict[str, Any]:
    return {"requests": [arrival(f"{prefix}-{i}", tenant, [i + 1]) for i in range(n)]}


def test_arrivals_within_a_tokens_rate_are_accepted_and_ingested(tmp_path, run, tenant_env) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 10, "burst_arrivals": 5})
        async with served(cfg, monotonic=Clock()) as (sc, client):
            for prefix, n in (("a", 3), ("b", 2)):  # the whole burst, in arrivals
                r = await client.post("/v1/requests", json=batch(prefix, n), headers=bearer(ACME))
                assert r.status_code == 202 and r.json()["accepted"] == n, r.text
            await settle(sc)
            assert sc.keeper.applied == 5
            assert await refusals(client) == no_refusals()

    run(main())


def test_a_batch_over_the_rate_is_refused_whole_429_with_retry_after_and_counted(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 2, "burst_arrivals": 4})
        clock = Clock()
        async with served(cfg, monotonic=clock) as (sc, client):
            r = await client.post("/v1/requests", json=batch("a", 4), headers=bearer(ACME))
            assert r.status_code == 202, r.text
            over = batch("b", 3)
            r = await client.post("/v1/requests", json=over, headers=bearer(ACME))
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "2"  # 3 arrivals at 2/s: 1.5 s, rounded up
            assert "2 arrivals/s" in r.json()["detail"]
            assert "nothing was taken" in r.json()["detail"]
            await settle(sc)
            assert sc.keeper.applied == 4 and sc.queue.accepted["http"] == 4
            assert await refusals(client) == no_refusals(rate=1.0)
            clock.now += 1.5  # as Retry-After said (it rounds up): now it fits
            r = await client.post("/v1/requests", json=over, headers=bearer(ACME))
            assert r.status_code == 202, r.text
            assert (r.json()["accepted"], r.json()["duplicates"]) == (3, 0)  # not remembered
            await settle(sc)
            assert sc.keeper.applied == 7

    run(main())


def test_the_budget_refills_with_time_up_to_the_burst(tmp_path, run, tenant_env) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 4, "burst_arrivals": 8})
        clock = Clock()
        async with served(cfg, monotonic=clock) as (_, client):

            async def post(prefix: str, n: int) -> int:
                r = await client.post("/v1/requests", json=batch(prefix, n), headers=bearer(ACME))
                return r.status_code

            assert await post("a", 8) == 202
            assert await post("b", 1) == 429
            clock.now += 0.5  # 2 arrivals' worth
            assert (await post("c", 3), await post("d", 2), await post("e", 1)) == (429, 202, 429)
            clock.now += 3600.0  # an hour idle saves the burst, no more
            assert (await post("f", 8), await post("g", 1)) == (202, 429)
            assert await refusals(client) == no_refusals(rate=4.0)

    run(main())


def test_each_entry_has_its_own_budget_and_the_shared_token_has_none(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 1, "burst_arrivals": 2},
                     {"max_arrivals_per_s": 1, "burst_arrivals": 3})  # fmt: skip
        async with served(cfg, monotonic=Clock()) as (sc, client):
            r = await client.post("/v1/requests", json=batch("a", 2), headers=bearer(ACME))
            assert r.status_code == 202
            r = await client.post("/v1/requests", json=batch("a2", 1), headers=bearer(ACME))
            assert r.status_code == 429  # acme's token is spent...
            r = await client.post(
                "/v1/requests", json=batch("g", 3, "globex"), headers=bearer(GLOBEX)
            )
            assert r.status_code == 202, r.text  # ...globex's is not
            # another entry speaking for acme (unlimited) and the shared token: not limited
            r = await client.post("/v1/requests", json=batch("b", 50), headers=bearer(BOTH))
            assert r.status_code == 202 and r.json()["accepted"] == 50, r.text
            r = await client.post("/v1/requests", json=batch("s", 500), headers=AUTH)
            assert r.status_code == 202 and r.json()["accepted"] == 500, r.text
            await settle(sc)
            assert sc.keeper.applied == 2 + 3 + 50 + 500
            assert await refusals(client) == no_refusals(rate=1.0)

    run(main())


def test_a_batch_over_the_burst_is_refused_400_asking_to_split_it(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 100, "burst_arrivals": 5})
        async with served(cfg, monotonic=Clock()) as (sc, client):
            r = await client.post("/v1/requests", json=batch("a", 6), headers=bearer(ACME))
            assert r.status_code == 400 and "retry-after" not in r.headers, r.text
            detail = r.json()["detail"]
            assert "6 arrivals is over this token's burst of 5" in detail
            assert "split it into batches of at most 5" in detail
            await settle(sc)
            assert sc.keeper.applied == 0 and sc.queue.accepted["http"] == 0
            assert await refusals(client) == no_refusals(burst=1.0)
            r = await client.post("/v1/requests", json=batch("b", 5), headers=bearer(ACME))
            assert r.status_code == 202, r.text  # the refused batch took nothing

    run(main())


def test_a_batch_refused_as_invalid_or_forbidden_uses_none_of_the_tokens_rate(
    tmp_path, run, tenant_env
) -> None:
    """Validation (422: an unknown node, a time far ahead) and the tenant checks (403) come
    before the rate is taken: a refused batch, whatever refused it, takes nothing."""

    async def main() -> None:
        cfg = config(tmp_path, {"max_arrivals_per_s": 0.001, "burst_arrivals": 2})
        async with served(cfg, monotonic=Clock()) as (sc, client):
            unknown = batch("a", 2)
            unknown["requests"][1]["node"] = "node-z"
            ahead = batch("b", 2)
            ahead["requests"][0]["ts_ms"] = 4e12  # decades ahead of the sidecar's clock
            deep = batch("c", 2)
            deep["requests"][0]["queue_depth"] = 3
            for body, status in ((unknown, 422), (ahead, 422), (deep, 403)):
                r = await client.post("/v1/requests", json=body, headers=bearer(ACME))
                assert r.status_code == status, r.text
            r = await client.post("/v1/requests", json=batch("d", 2), headers=bearer(ACME))
            assert r.status_code == 202 and r.json()["accepted"] == 2, r.text  # the whole burst
            r = await client.post("/v1/requests", json=batch("e", 1), headers=bearer(ACME))
            assert r.status_code == 429  # and now it is spent
            await settle(sc)
            assert sc.keeper.applied == 2
            assert await refusals(client) == no_refusals(queue_depth=1.0, rate=1.0)

    run(main())


def test_the_openapi_schema_documents_the_429_and_its_retry_after(tmp_path, tenant_env) -> None:
    from kvcast.serving.sidecar.api import build_app

    cfg = config(tmp_path, {"max_arrivals_per_s": 1})
    post = build_app(make_sidecar(cfg)).openapi()["paths"]["/v1/requests"]["post"]
    assert "Retry-After" in post["responses"]["429"]["headers"]
    assert "400" in post["responses"]
    assert "max_arrivals_per_s" in post["description"] and "429" in post["description"]
