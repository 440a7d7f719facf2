"""Tenant tokens as both services read them: each presented token is identified exactly (the
shared token has every right, a tenant token its tenants and its entry's position, anything
else none; with no shared token nothing is guarded, and tenant tokens without one are
refused); a secret over the service's limit, or with surrounding whitespace, is refused naming
its entry and variable, never the secret; a service is handed exactly its config's tokens."""

from __future__ import annotations

import pytest

from kvcast.serving.http.auth import ADMIN, Identity, KnownTokens
from kvcast.serving.http.tenant_tokens import TenantToken, given_tenant_tokens, read_tenant_tokens

SHARED = "shared-s3cret"
TOKENS = {"a-s3cret": ["acme"], "g-s3cret": ["globex", "initech"]}


def test_each_presented_token_is_identified_exactly() -> None:
    known = KnownTokens(SHARED, TOKENS)
    assert known.identify(SHARED.encode()) == ADMIN
    assert known.identify(b"a-s3cret") == Identity(frozenset({"acme"}), 0)
    assert known.identify(b"g-s3cret") == Identity(frozenset({"globex", "initech"}), 1)
    for other in (b"", b"a-s3cre", b"a-s3cretx", SHARED.upper().encode()):
        assert known.identify(other) is None
    tenant = known.identify(b"g-s3cret")
    assert tenant is not None and tenant.speaks_for("initech") and not tenant.speaks_for("acme")
    assert ADMIN.speaks_for("anyone")


def test_without_a_shared_token_nothing_is_guarded_and_tenant_tokens_are_refused() -> None:
    assert KnownTokens(None).identify(b"") == ADMIN
    assert KnownTokens(None).identify(b"whatever") == ADMIN
    with pytest.raises(ValueError, match="tenant tokens need a shared token"):
        KnownTokens(None, TOKENS)


def test_a_token_over_the_services_limit_is_refused_naming_the_entry_never_the_secret() -> None:
    entries = [TenantToken(tenants=("acme",), token_env="KT_A")]
    env = {"KT_A": "x" * 2049}
    with pytest.raises(ValueError) as err:
        read_tenant_tokens(entries, SHARED, env, max_bytes=2048)
    assert "tenant_tokens[0] (KT_A): its token is 2049 bytes (UTF-8), over 2048" in str(err.value)
    assert "xxx" not in str(err.value)
    assert read_tenant_tokens(entries, SHARED, env) == {"x" * 2049: frozenset({"acme"})}
    assert read_tenant_tokens(entries, SHARED, {"KT_A": "x" * 2048}, max_bytes=2048)


def test_a_token_no_header_can_carry_is_refused_naming_the_entry_never_the_secret() -> None:
    entries = [TenantToken(tenants=("acme",), token_env="KT_A")]
    with pytest.raises(ValueError) as err:
        read_tenant_tokens(entries, SHARED, {"KT_A": "s3cret-é"})
    assert "tenant_tokens[0] (KT_A): its token holds a character an HTTP header" in str(err.value)
    assert "s3cret" not in str(err.value) and "é" not in str(err.value)


@pytest.mark.parametrize("value", [SHARED + " ", " a-s3cret", "a-s3cret\t"])
def test_a_token_with_surrounding_whitespace_is_refused(value: str) -> None:
    """A bearer header's token is read stripped: ``SHARED + " "`` would pass for the shared
    token over HTTP."""
    entries = [TenantToken(tenants=("acme",), token_env="KT_A")]
    with pytest.raises(ValueError) as err:
        read_tenant_tokens(entries, SHARED, {"KT_A": value})
    assert "tenant_tokens[0] (KT_A): its token has leading or trailing whitespace" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_a_service_is_handed_exactly_its_configs_tokens() -> None:
    entries = [TenantToken(tenants=("acme",), token_env="KT_A"),
               TenantToken(tenants=("globex", "initech"), token_env="KT_G")]  # fmt: skip
    given = {k: frozenset(v) for k, v in TOKENS.items()}
    assert given_tenant_tokens(given, entries) == given
    assert given_tenant_tokens(None, []) == {}
    for wrong in (None, dict(reversed(given.items())), {"a-s3cret": frozenset({"acme"})}):
        with pytest.raises(ValueError, match="do not match the config's 2 tenant_tokens"):
            given_tenant_tokens(wrong, entries)
