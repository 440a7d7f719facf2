"""Shared-token auth of the agent's HTTP API: with a token configured, every route that moves,
deletes, pins or lists data refuses a request without it (401, counted) before reading the
body; probes and scrapes stay open; with no token configured everything is open."""

from __future__ import annotations

import pytest
from agent_routes import DATA_ROUTES, UPLOAD

from kvcast.serving.agent import Agent, HostBuffer, checksum
from kvcast.serving.http.auth import token_from_env, token_matches

TOKEN = "s3cret-token"
BAD_HEADERS = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": TOKEN},
]


def put_block(agent: Agent, tenant: str, h: int) -> None:
    buf = HostBuffer.from_bytes(b"kv" * 50)
    agent.store.put(tenant, h, buf, checksum(buf.view()))


@pytest.mark.parametrize(("method", "path"), DATA_ROUTES)
def test_data_route_without_the_token_is_refused_401_and_counted(
    run, metric, control_api, method: str, path: str
) -> None:
    async def scenario() -> None:
        async with control_api(token=TOKEN) as (api, control):
            put_block(control.agent, "t", 1)
            body = {"tenant": "t", "block_hashes": [1]}
            for headers in BAD_HEADERS:
                kwargs = {"json": body} if method == "POST" else {}
                r = await api.request(method, path, headers=headers, **kwargs)
                assert r.status_code == 401, (headers, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
            assert control.agent.store.info("t", 1).pins == 0  # nothing happened
            assert len(control.agent.store) == 1
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_auth_failures_total", surface="http") == len(
                BAD_HEADERS
            )
            if method == "POST":
                command = path.removeprefix("/v1/").replace("-", "_")
                labels = {"command": command, "reason": "unauthorized"}
                refused = metric(text, "kvcast_agent_commands_refused_total", **labels)
                assert refused == len(BAD_HEADERS)

    run(scenario())


def test_unauthenticated_garbage_gets_401_not_a_validation_answer(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=TOKEN) as (api, _):
            r = await api.post("/v1/evict", content=b"{garbage", headers={"x": "y"})
            assert r.status_code == 401 and "tenant" not in r.text

    run(scenario())


def test_the_right_token_is_accepted_on_every_data_route(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api(token=TOKEN) as (api, control):
            put_block(control.agent, "t", 1)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            body = {"tenant": "t", "block_hashes": [1]}
            assert (await api.post("/v1/pin", json=body, headers=auth)).status_code == 200
            assert (await api.post("/v1/unpin", json=body, headers=auth)).status_code == 200
            assert (await api.get("/v1/inventory", headers=auth)).json()["blocks"]
            r = await api.post("/v1/evict", json=body, headers=auth)
            assert r.json()["evicted"] == [1]
            es = await api.post("/v1/engine-stats", json={"queue_depth": 1}, headers=auth)
            assert es.status_code == 204
            assert control.http_auth_failures == 0

    run(scenario())


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/telemetry", "/metrics"])
def test_probes_telemetry_and_metrics_stay_open_with_a_token(run, control_api, path) -> None:
    async def scenario() -> None:
        async with control_api(token=TOKEN) as (api, _):
            assert (await api.get(path)).status_code == 200

    run(scenario())


@pytest.mark.parametrize(("method", "path"), DATA_ROUTES)
def test_without_a_token_configured_every_route_is_open(
    run, control_api, method: str, path: str
) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            put_block(control.agent, "t", 1)
            kwargs = {}
            if method == "POST":
                kwargs["json"] = (
                    {"queue_depth": 1}
                    if path.endswith("engine-stats")
                    else {"tenant": "t", "block_hashes": [1]}
                )
            if path.endswith("replicate"):
                kwargs["json"] |= {"command_id": "c", "source": control.agent.address}
                kwargs["json"] |= {"deadline_s": 2.0}
            if path.endswith(("hold", "release")):
                kwargs["json"] |= {"claim_id": "r-1"}
            if path.endswith("hold"):
                kwargs["json"] |= {"hold_s": 5.0}
            r = await api.request(method, path, **kwargs)
            assert r.status_code in (200, 204), r.text
            assert control.http_auth_failures == 0

    run(scenario())


def test_replicate_carries_the_token_to_a_source_that_requires_it(
    run, config, control_api, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config(token=TOKEN)) as src:
            fill_agent(src, "t", {1: 1024})
            body = {"command_id": "c", "source": src.address, "tenant": "t",
                    "block_hashes": [1], "deadline_s": 2.0}  # fmt: skip
            async with control_api(token=TOKEN) as (api, _):
                auth = {"Authorization": f"Bearer {TOKEN}"}
                r = await api.post("/v1/replicate", json=body, headers=auth)
                assert r.json()["status"] == "ok"
            async with control_api(token="other") as (api, _):
                auth = {"Authorization": "Bearer other"}
                r = await api.post("/v1/replicate", json=body, headers=auth)
                assert r.json()["status"] == "refused" and "UNAUTHORIZED" in r.json()["error"]
            assert src.server.stats.auth_refused == 1

    run(scenario())


def test_token_comparison_is_exact() -> None:
    token = TOKEN.encode()
    assert token_matches(f"Bearer {TOKEN}".encode(), token)
    assert token_matches(f"bearer {TOKEN}".encode(), token)  # the scheme is case-insensitive
    for bad in (None, b"", TOKEN.encode(), b"Bearer ", f"Bearer {TOKEN.upper()}".encode()):
        assert not token_matches(bad, token)


def test_an_empty_token_variable_is_refused_rather_than_leaving_routes_open() -> None:
    assert token_from_env(None, "KVCAST_TOKEN") is None
    assert token_from_env("abc", "KVCAST_TOKEN") == "abc"
    with pytest.raises(ValueError, match="KVCAST_TOKEN is set but empty"):
        token_from_env("  ", "KVCAST_TOKEN")


OPEN_PATHS = {"/healthz", "/readyz", "/v1/telemetry", "/metrics"}


def test_every_route_in_the_schema_but_probes_and_scrapes_refuses_a_request_without_the_token(
    run, control_api
) -> None:
    """Read from the app's own OpenAPI schema, so that a route added later is covered: every
    route that is not a probe or a scrape answers 401 without the token (a new open route
    must be added to ``OPEN_PATHS`` on purpose)."""

    async def scenario() -> None:
        async with control_api(token=TOKEN) as (api, control):
            put_block(control.agent, "t", 1)
            schema = (await api.get("/openapi.json")).json()
            seen_open, guarded = set(), set()
            for template, methods in schema["paths"].items():
                path = template.replace("{", "").replace("}", "")  # a parameter's name: a value
                for method in methods:
                    r = await api.request(method.upper(), path, headers={"x": "y"})
                    if template in OPEN_PATHS:
                        seen_open.add(template)
                        assert r.status_code == 200, (method, template, r.text)
                    else:
                        assert r.status_code == 401, (method, template, r.text)
                        guarded.add((method.upper(), template))
            assert seen_open == OPEN_PATHS
            assert set(DATA_ROUTES) | {UPLOAD} == guarded  # every guarded route is listed
            assert len(control.agent.store) == 1  # nothing moved

    run(scenario())


def test_tokens_are_compared_by_fixed_length_digests_so_time_tells_no_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compare_digest's time does not depend on where two strings differ, but it does on
    their lengths: every comparison is of 32-byte SHA-256 digests, whatever was presented."""
    import hmac

    from kvcast.serving.http.auth import KnownTokens

    lengths: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        lengths.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    known = KnownTokens(TOKEN, {"t" * 50: ["acme"]})
    for presented in (b"", b"x", TOKEN.encode(), b"t" * 50, b"y" * 3000):
        known.identify(presented)
    assert known.identify(TOKEN.encode()) is not None
    assert known.identify(b"t" * 50).tenants == frozenset({"acme"})
    assert known.identify(b"t" * 49) is None
    token_matches(b"Bearer short", TOKEN.encode())
    assert lengths and set(lengths) == {(32, 32)}
