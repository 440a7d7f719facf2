"""Requests per second per tenant token: past its burst a tenant token's request is refused
429 with the seconds until one fits (rounded up) before the app runs, counted; its bucket
refills at its rate; other tokens, the shared token and requests the guard did not admit are
never limited."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from kvcast.serving.http.auth import ADMIN, IDENTITY, Identity
from kvcast.serving.http.request_rates import TenantRequestRates
from kvcast.serving.token_bucket import TokenBucket

ACME = Identity(frozenset({"acme"}), 0)
GLOBEX = Identity(frozenset({"globex"}), 1)


def client(now: list[float], limited: list[str], ran: list[str]) -> httpx.AsyncClient:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    rates = TenantRequestRates(app, {0: TokenBucket(2.0, 2, lambda: now[0])}, limited.append)

    async def as_identity(scope: Scope, receive: Receive, send: Send) -> None:
        name = dict(scope["headers"]).get(b"a-who", b"").decode()
        who = {"acme": ACME, "globex": GLOBEX, "admin": ADMIN}.get(name)
        if who is not None:  # the guard's part: the identity it admitted
            scope.setdefault("state", {})[IDENTITY] = who
        await rates(scope, receive, send)

    transport = httpx.ASGITransport(app=as_identity)
    return httpx.AsyncClient(transport=transport, base_url="http://x")


def test_a_tenant_token_past_its_burst_is_refused_until_its_bucket_refills() -> None:
    async def scenario() -> None:
        now, limited, ran = [0.0], [], []
        async with client(now, limited, ran) as api:

            async def get(who: str) -> Any:
                return await api.get(f"/v1/{who}", headers={"a-who": who})

            assert [(await get("acme")).status_code for _ in range(2)] == [200, 200]
            r = await get("acme")
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "rate limit (2 requests/s, bursts of 2) is spent" in r.json()["detail"]
            assert "fits in 0.5 s" in r.json()["detail"]
            for who in ("globex", "admin", "nobody"):  # not limited
                assert [(await get(who)).status_code for _ in range(5)] == [200] * 5
            now[0] = 0.5  # one request's worth refilled
            assert (await get("acme")).status_code == 200
            assert (await get("acme")).status_code == 429
            assert limited == ["/v1/acme", "/v1/acme"]
            assert ran.count("/v1/acme") == 3

    asyncio.run(scenario())
