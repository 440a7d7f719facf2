"""Each tenant token's share of the ingestion queue, on the sidecar's API served by uvicorn on
a real socket, while the consumer is held back (a query that waits, run on the consumer's own
thread): a token's arrivals waiting in the queue stay within its entry's ``max_queue_share``
of ``queue_events``; a batch that would pass it is refused whole (429, ``Retry-After``),
nothing taken (not its rate, not its request ids), counted; a batch over the whole share is
400; other tokens, the shared token and the engines are not held back by it; once the
consumer catches up, the token posts again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sidecar_harness import AUTH, TOKEN, arrival, bearer, no_refusals, refusals, served, settle
from sidecar_harness import sidecar_config as base_config

ACME, GLOBEX = "share-token-acme", "share-token-globex"
ENVS = ("KVCAST_TEST_SHARE_ACME", "KVCAST_TEST_SHARE_GLOBEX")


@pytest.fixture
def tenant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for env, token in zip(ENVS, (ACME, GLOBEX), strict=True):
        monkeypatch.setenv(env, token)


def config(tmp_path: Any, acme: dict[str, Any]) -> Any:
    """A 100-event queue; acme's token with ``acme``'s settings, globex's with the default."""
    tokens = [
        {"tenants": ["acme"], "token_env": ENVS[0], **acme},
        {"tenants": ["globex"], "token_env": ENVS[1]},
    ]
    return base_config(tmp_path, token=TOKEN, tenant_tokens=tokens, queue_events=100)


def batch(prefix: str, n: int, tenant: str = "acme") -> dict[str, Any]:
    return {"requests": [arrival(f"{prefix}-{i}", tenant, [i + 1]) for i in range(n)]}


@asynccontextmanager
async def consumer_held(sc: Any) -> AsyncIterator[None]:
    """The sidecar's consumer thread busy with a query until the block ends: events wait."""
    go, started = threading.Event(), threading.Event()

    def wait(_: Any) -> None:
        started.set()
        go.wait(10.0)

    done = sc.keeper.ask(wait)
    await asyncio.to_thread(started.wait, 5.0)
    try:
        yield
    finally:
        go.set()
        await asyncio.wrap_future(done)


def test_a_batch_past_the_tokens_queue_share_is_refused_whole_and_nothing_taken(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_queue_share": 0.1, "max_arrivals_per_s": 100,
                                "burst_arrivals": 15})  # fmt: skip
        async with served(cfg) as (sc, client):
            async with consumer_held(sc):
                r = await client.post("/v1/requests", json=batch("a", 6), headers=bearer(ACME))
                assert r.status_code == 202, r.text
                assert sc.queue.held(0) == 6
                over = batch("b", 5)  # 6 + 5 > 10, its share of 100
                r = await client.post("/v1/requests", json=over, headers=bearer(ACME))
                assert r.status_code == 429, r.text
                assert r.headers["retry-after"] == "1"
                assert "6 of its 10 events" in r.json()["detail"]
                assert sc.queue.held(0) == 6 and len(sc.queue) == 6
                r = await client.post("/v1/requests", json=batch("c", 4), headers=bearer(ACME))
                assert r.status_code == 202, r.text  # up to its share: 10
                assert await refusals(client) == no_refusals(queue_share=1.0)
            await settle(sc)
            assert sc.queue.held(0) == 0 and sc.keeper.applied == 10
            r = await client.post("/v1/requests", json=over, headers=bearer(ACME))
            assert r.status_code == 202, r.text  # its ids were not remembered, nor its rate
            assert (r.json()["accepted"], r.json()["duplicates"]) == (5, 0)
            await settle(sc)
            assert sc.keeper.applied == 15

    run(main())


def test_one_tokens_full_share_holds_back_no_other_poster(tmp_path, run, tenant_env) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_queue_share": 0.1})
        async with served(cfg) as (sc, client):
            async with consumer_held(sc):
                r = await client.post("/v1/requests", json=batch("a", 10), headers=bearer(ACME))
                assert r.status_code == 202, r.text
                r = await client.post("/v1/requests", json=batch("a2", 1), headers=bearer(ACME))
                assert r.status_code == 429, r.text
                globex = batch("g", 30, "globex")  # its own share: 0.5 of 100
                r = await client.post("/v1/requests", json=globex, headers=bearer(GLOBEX))
                assert r.status_code == 202, r.text
                shared = batch("s", 50)  # the shared token is never capped
                r = await client.post("/v1/requests", json=shared, headers=AUTH)
                assert r.status_code == 202, r.text
                assert (sc.queue.held(0), sc.queue.held(1), len(sc.queue)) == (10, 30, 90)
                assert sc.queue.dropped == 0  # acme's flood pushed nobody out
            await settle(sc)
            assert sc.keeper.applied == 90

    run(main())


def test_a_batch_over_the_whole_share_is_400_and_says_split_it(tmp_path, run, tenant_env) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_queue_share": 0.05})
        async with served(cfg) as (sc, client):
            r = await client.post("/v1/requests", json=batch("a", 6), headers=bearer(ACME))
            assert r.status_code == 400, r.text
            assert "share of the ingestion queue (5 events)" in r.json()["detail"]
            assert "split" in r.json()["detail"]
            assert len(sc.queue) == 0 and sc.keeper.applied == 0
            assert await refusals(client) == no_refusals(queue_share=1.0)

    run(main())


@pytest.mark.parametrize("share", [0, -0.5, 1.5])
def test_a_share_outside_0_to_1_is_refused_naming_the_key(tmp_path, share: float) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_queue_share"):
        config(tmp_path, {"max_queue_share": share})


def test_a_retried_batch_queues_nothing_and_is_not_refused_for_the_share(
    tmp_path, run, tenant_env
) -> None:
    """A router that lost the answer posts the batch again: its arrivals were seen, so it
    takes nothing of the share; only its new arrivals count."""

    async def main() -> None:
        cfg = config(tmp_path, {"max_queue_share": 0.1})
        async with served(cfg) as (sc, client):
            async with consumer_held(sc):
                first = batch("a", 8)
                r = await client.post("/v1/requests", json=first, headers=bearer(ACME))
                assert r.status_code == 202, r.text
                r = await client.post("/v1/requests", json=first, headers=bearer(ACME))
                assert r.status_code == 202, r.text
                assert (r.json()["accepted"], r.json()["duplicates"]) == (0, 8)
                more = {"requests": first["requests"] + batch("b", 2)["requests"]}
                r = await client.post("/v1/requests", json=more, headers=bearer(ACME))
                assert r.status_code == 202, r.text  # 8 seen + 2 new: 10, its share
                more = {"requests": first["requests"] + batch("c", 1)["requests"]}
                r = await client.post("/v1/requests", json=more, headers=bearer(ACME))
                assert r.status_code == 429, r.text  # 1 new past a full share
                assert sc.queue.held(0) == 10
            await settle(sc)
            assert sc.keeper.applied == 10

    run(main())


def test_a_batch_over_the_burst_is_400_before_a_full_share_says_wait(
    tmp_path, run, tenant_env
) -> None:
    async def main() -> None:
        cfg = config(tmp_path, {"max_queue_share": 0.1, "max_arrivals_per_s": 100,
                                "burst_arrivals": 8})  # fmt: skip
        async with served(cfg) as (sc, client), consumer_held(sc):
            r = await client.post("/v1/requests", json=batch("a", 8), headers=bearer(ACME))
            assert r.status_code == 202, r.text
            r = await client.post("/v1/requests", json=batch("b", 9), headers=bearer(ACME))
            assert r.status_code == 400 and "burst of 8" in r.json()["detail"], r.text
            assert await refusals(client) == no_refusals(burst=1.0)

    run(main())
