"""The ingest token as both services' guard reads it: it is identified as every tenant's
reports (``Identity.ingest``, speaking for every tenant as the shared token does); the guard
lets it reach its ``ingest_routes`` only and answers it 403 anywhere else it guards (counted by
``on_ingest_forbidden``, never as a tenant token's refusal or a bad token's), while its paths
grant a tenant token nothing; a transfer server, which is never given it, takes it for an
unknown token. An ingest token without a shared token, equal to the shared token or to a tenant
token, blank, or with surrounding whitespace is refused, the error naming where each came from,
never the secret; the configs hold it as a secret."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from kvcast.serving.http.auth import (
    ADMIN,
    INGEST,
    BearerTokenGuard,
    Identity,
    KnownTokens,
    Who,
)
from kvcast.serving.http.ingest_token import check_ingest_token
from kvcast.serving.http.tenant_tokens import TenantToken, read_tenant_tokens

SHARED, REPORTS = "shared-s3cret", "ingest-s3cret"
TENANTS = {"acme-s3cret": ["acme"]}


def test_the_ingest_token_is_identified_as_every_tenants_reports() -> None:
    known = KnownTokens(SHARED, TENANTS, REPORTS)
    found = known.identify(REPORTS.encode())
    assert found == INGEST and found is not None
    assert found.ingest and found.all_tenants and found.speaks_for("anyone") and found.token is None
    assert known.identify(SHARED.encode()) == ADMIN and not ADMIN.ingest
    assert known.identify(b"acme-s3cret") == Identity(frozenset({"acme"}), 0)
    for other in (b"", REPORTS[:-1].encode(), (REPORTS + "x").encode(), REPORTS.upper().encode()):
        assert known.identify(other) is None


@pytest.mark.parametrize(
    ("shared", "tenants", "ingest", "message"),
    [
        (None, {}, REPORTS, "the ingest token is set but the shared token is not"),
        (SHARED, {}, SHARED, "the ingest token is the same as the shared token"),
        (SHARED, TENANTS, "acme-s3cret", "the ingest token is the same as a tenant token"),
        (SHARED, {}, " ", "the ingest token is set but empty"),
        (SHARED, {}, REPORTS + " ", "the ingest token has leading or trailing whitespace"),
        (SHARED, {}, "\t" + SHARED, "the ingest token has leading or trailing whitespace"),
        # a bearer header's token is read stripped: a padded shared token would be this one
        (SHARED + " ", {}, SHARED, "the ingest token is the same as the shared token"),
        (SHARED, {"acme-s3cret\n": ["acme"]}, "acme-s3cret", "the same as a tenant token"),
    ],
)  # fmt: skip
def test_an_ingest_token_that_would_weaken_the_service_is_refused_never_showing_it(
    shared: str | None, tenants: dict[str, list[str]], ingest: str, message: str
) -> None:
    with pytest.raises(ValueError) as err:
        KnownTokens(shared, tenants, ingest)
    assert message in str(err.value) and "s3cret" not in str(err.value)


def test_the_errors_name_where_each_token_came_from() -> None:
    with pytest.raises(ValueError) as err:
        check_ingest_token(REPORTS, None, (), "KVCAST_INGEST_TOKEN", "KVCAST_TOKEN")
    assert str(err.value).startswith("KVCAST_INGEST_TOKEN is set but KVCAST_TOKEN is not")
    with pytest.raises(ValueError) as err:
        check_ingest_token(SHARED, SHARED, (), "MY_INGEST", "MY_SHARED")
    assert str(err.value).startswith("MY_INGEST is the same as MY_SHARED")
    check_ingest_token(None, None)  # none: nothing to check
    check_ingest_token(REPORTS, SHARED, TENANTS)


def test_a_tenant_token_equal_to_the_ingest_token_is_refused_naming_its_variable() -> None:
    entries = [TenantToken(tenants=("acme",), token_env="KT_A")]
    with pytest.raises(ValueError) as err:
        read_tenant_tokens(entries, SHARED, {"KT_A": REPORTS}, ingest=REPORTS)
    assert "tenant_tokens[0] (KT_A): its token is the ingest token" in str(err.value)
    assert "s3cret" not in str(err.value)
    assert read_tenant_tokens(entries, SHARED, {"KT_A": "a"}, ingest=REPORTS) == {
        "a": frozenset({"acme"})
    }


def _guarded_app(**guard: Any) -> tuple[FastAPI, Counter[str], list[Identity]]:
    """A tiny app behind the guard: ``/report`` (an ingest path), ``/command``, ``/tenant``
    (a tenant path) protected, ``/open`` not; refusals counted by kind, identities seen."""
    app, counts, seen = FastAPI(), Counter[str](), []
    for path in ("/report", "/command", "/tenant", "/open"):

        async def handler(who: Who) -> dict[str, bool]:
            seen.append(who)
            return {"all_tenants": who.all_tenants}

        app.post(path)(handler)
    app.delete("/report")(handler)  # a command on the report's path: not the ingest token's
    app.add_middleware(
        BearerTokenGuard, token=SHARED, protected={"/report", "/command", "/tenant"},
        on_refused=lambda p: counts.update(["401"]), tenant_tokens=TENANTS,
        tenant_paths={"/tenant"}, on_forbidden=lambda p: counts.update(["tenant 403"]),
        ingest_token=REPORTS, ingest_routes={("POST", "/report")},
        on_ingest_forbidden=lambda p: counts.update([f"ingest 403 {p}"]), **guard,
    )  # fmt: skip
    return app, counts, seen


def test_the_guard_lets_the_ingest_token_reach_its_routes_only() -> None:
    async def main() -> None:
        app, counts, seen = _guarded_app()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://guarded") as client:
            mine = {"Authorization": f"Bearer {REPORTS}"}
            r = await client.post("/report", headers=mine)
            assert r.status_code == 200 and r.json() == {"all_tenants": True}
            assert seen == [INGEST]
            for path in ("/command", "/tenant"):
                r = await client.post(path, headers=mine)
                assert r.status_code == 403, r.text
                detail = r.json()["detail"]
                assert f"the ingest token may not use POST {path}" in detail
                assert "it may only report (POST /report)" in detail
            r = await client.delete("/report", headers=mine)  # its path, another method
            assert r.status_code == 403 and "may not use DELETE /report" in r.json()["detail"]
            assert (await client.post("/open", headers=mine)).status_code == 200  # unguarded
            r = await client.post("/report", headers={"Authorization": f"Bearer {REPORTS}x"})
            assert r.status_code == 401
        assert len(seen) == 2  # the refused requests never reached a handler
        assert counts == Counter(
            {"ingest 403 /command": 1, "ingest 403 /tenant": 1, "ingest 403 /report": 1, "401": 1}
        )

    asyncio.run(asyncio.wait_for(main(), 10.0))


def test_the_ingest_routes_grant_a_tenant_token_nothing() -> None:
    async def main() -> None:
        app, counts, seen = _guarded_app()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://guarded") as client:
            acme = {"Authorization": "Bearer acme-s3cret"}
            r = await client.post("/report", headers=acme)
            assert r.status_code == 403 and "a tenant token may not use" in r.json()["detail"]
            assert (await client.post("/tenant", headers=acme)).status_code == 200
            shared = {"Authorization": f"Bearer {SHARED}"}
            for path in ("/report", "/command", "/tenant"):
                assert (await client.post(path, headers=shared)).status_code == 200
        assert counts == Counter({"tenant 403": 1})
        assert seen == [Identity(frozenset({"acme"}), 0), ADMIN, ADMIN, ADMIN]

    asyncio.run(asyncio.wait_for(main(), 10.0))


@pytest.mark.parametrize("kind", ["sidecar", "agent"])
def test_a_config_holds_the_ingest_token_as_a_secret_and_refuses_it_alone(kind: str) -> None:
    from kvcast.config import ConfigError, parse_config
    from kvcast.serving.agent.config import AgentConfig
    from kvcast.serving.sidecar.config import SidecarConfig

    model, base = (
        (SidecarConfig, {"nodes": [{"name": "a"}]}) if kind == "sidecar"
        else (AgentConfig, {"capacity_bytes": 1 << 20, "speculative_quota_bytes": 0})
    )  # fmt: skip
    cfg = parse_config(model, base | {"token": SHARED, "ingest_token": REPORTS}, "x.yaml")
    assert cfg.ingest_token_value == REPORTS and cfg.token_value == SHARED
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.model_dump())
    for bad, message in (
        ({"ingest_token": REPORTS}, "ingest_token is set but token is not"),
        ({"token": SHARED, "ingest_token": SHARED}, "ingest_token is the same as token"),
        ({"token": SHARED, "ingest_token": " "}, "the token is set but empty"),
        # a number (YAML reads an unquoted digit string so): refused, never shown
        ({"token": SHARED, "ingest_token": 20240101123456}, "key 'ingest_token'"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_config(model, base | bad, "x.yaml")
        assert message in str(err.value) and "s3cret" not in str(err.value)
        assert "20240101123456" not in str(err.value)
        # validated directly (a library caller): pydantic's own error text shows no value
        with pytest.raises(ValidationError) as raw:
            model.model_validate(base | bad)
        assert "s3cret" not in str(raw.value)
