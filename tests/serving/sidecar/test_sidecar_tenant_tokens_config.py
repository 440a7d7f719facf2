"""The config's ``tenant_tokens:`` section: secrets come from the environment, read at
start-up (never by validating the config: a config with tenant tokens validates without their
variables or the shared token's, as ``cluster up`` validates the files it writes); an unset or
empty variable, a token shared by two entries or equal to the shared token, and tenant tokens
without a shared token are refused at start-up, each error naming the entry and its variable
(never a secret), as are malformed entries by the config (a rate not > 0, a burst under 1 or
without a rate), naming the value; an entry is unlimited by default, its burst two seconds of
its rate unless set; a sidecar is given exactly its config's tenant tokens;
configs/serving/sidecar.yaml documents every key, with none configured by default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcast.config import ConfigError, load_config, parse_config
from kvcast.serving.http.tenant_tokens import read_tenant_tokens
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.tenant_tokens import TenantTokenConfig

NODES = [{"name": "a"}]
SHARED = "shared-s3cret"
ENV = {"KT_ACME": "acme-s3cret", "KT_GLOBEX": "globex-s3cret", "KT_COPY": "acme-s3cret",
       "KT_SHARED": SHARED, "KT_BLANK": "  "}  # fmt: skip


@pytest.fixture(autouse=True)
def tenant_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KT_UNSET", raising=False)


def entry(env: str, *tenants: str) -> dict:
    return {"tenants": list(tenants or ("acme",)), "token_env": env}


def parse(tokens: list[dict], token: str | None = SHARED) -> SidecarConfig:
    return parse_config(SidecarConfig, {"nodes": NODES, "token": token, "tenant_tokens": tokens},
                        "sidecar.yaml")  # fmt: skip


def secrets(tokens: list[dict], token: str | None = SHARED) -> dict[str, frozenset[str]]:
    """The tenant tokens of a config with these entries, as read at start-up."""
    cfg = parse(tokens, token)
    return read_tenant_tokens(cfg.tenant_tokens, cfg.token_value, os.environ)


def test_each_tenant_token_is_read_from_its_variable() -> None:
    got = secrets([entry("KT_ACME", "acme"), entry("KT_GLOBEX", "globex", "initech")])
    assert got == {
        "acme-s3cret": frozenset({"acme"}), "globex-s3cret": frozenset({"globex", "initech"})
    }  # fmt: skip
    cfg = parse([entry("KT_ACME", "acme")])
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.model_dump())


@pytest.mark.parametrize(
    ("tokens", "token", "message"),
    [
        ([entry("KT_UNSET")], SHARED, "tenant_tokens[0]: its token_env KT_UNSET is not set"),
        ([entry("KT_ACME"), entry("KT_BLANK")], SHARED,
         "tenant_tokens[1]: its token_env KT_BLANK is empty"),
        ([entry("KT_ACME"), entry("KT_COPY", "globex")], SHARED,
         "tenant_tokens[0] (KT_ACME) and tenant_tokens[1] (KT_COPY) have the same token"),
        ([entry("KT_ACME"), entry("KT_ACME", "globex")], SHARED,
         "tenant_tokens[0] (KT_ACME) and tenant_tokens[1] (KT_ACME) have the same token"),
        ([entry("KT_SHARED")], SHARED,
         "tenant_tokens[0] (KT_SHARED): its token is the shared token"),
        ([entry("KT_ACME")], None, "tenant_tokens need a shared token"),
    ],
)  # fmt: skip
def test_a_bad_tenant_token_is_refused_at_start_up_naming_the_entry_and_variable(
    tokens, token, message
) -> None:
    with pytest.raises(ValueError) as err:
        secrets(tokens, token)
    assert message in str(err.value)
    assert "s3cret" not in str(err.value)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ([entry("KT_ACME", "acme", "globex", "acme")],
         "key 'tenant_tokens.0': tenants named twice: ['acme']"),
        ([{"tenants": [], "token_env": "KT_ACME"}],
         "key 'tenant_tokens.0.tenants': Tuple should have at least 1 item"),
        ([entry("KT-ACME")], "key 'tenant_tokens.0.token_env': the entry for tenants "
         "['acme']: its token_env must name an environment variable"),  # (never shown)
        ([entry("KT_ACME", "bad\ttenant")], "(got 'bad\\ttenant')"),
        ([{"tenants": ["acme"], "token_env": "KT_ACME", "token": "inline"}],
         "key 'tenant_tokens.0.token': unknown key"),  # secrets are never written in YAML
        ([entry("KT_ACME"), entry("KT_GLOBEX") | {"max_arrivals_per_s": 0}],
         "key 'tenant_tokens.1.max_arrivals_per_s': Input should be greater than or equal to "
         "0.001 (got 0)"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": -5.0}],
         "key 'tenant_tokens.0.max_arrivals_per_s': Input should be greater than or equal to"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": 1e-310}],  # a Retry-After past any clock
         "key 'tenant_tokens.0.max_arrivals_per_s': Input should be greater than or equal to"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": float("inf")}],
         "key 'tenant_tokens.0.max_arrivals_per_s': Input should be a finite number"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": "100"}],
         "key 'tenant_tokens.0.max_arrivals_per_s': Input should be a valid number"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": 10, "burst_arrivals": 0}],
         "key 'tenant_tokens.0.burst_arrivals': Input should be greater than or equal to 1"),
        ([entry("KT_ACME") | {"max_arrivals_per_s": 10, "burst_arrivals": 2.5}],
         "key 'tenant_tokens.0.burst_arrivals': Input should be a valid integer"),
        ([entry("KT_ACME"), entry("KT_GLOBEX") | {"burst_arrivals": 10}],
         "key 'tenant_tokens.1': burst_arrivals needs max_arrivals_per_s"),
    ],
)  # fmt: skip
def test_a_malformed_tenant_token_entry_is_refused_by_the_config_naming_the_value(
    tokens, message
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(tokens)
    assert message in str(err.value)
    assert "s3cret" not in str(err.value)


def test_validating_a_config_with_tenant_tokens_never_reads_the_environment(
    tmp_path, monkeypatch
) -> None:
    """``cluster up`` validates the sidecar file it writes, its shared token in KVCAST_TOKEN
    and the tenant tokens' variables set (or not) only where the sidecar runs."""
    from kvcast.serving.cluster.config_gen import feature_spec, write_configs

    monkeypatch.delenv("KVCAST_TOKEN", raising=False)
    tokens = [entry("KT_UNSET"), entry("KT_BLANK", "globex")]
    sidecar = {"nodes": NODES, "decision_log": {"path": None}, "tenant_tokens": tokens}
    path = write_configs(tmp_path, sidecar, {})
    assert [e.token_env for e in load_config(SidecarConfig, path).tenant_tokens] == [
        "KT_UNSET", "KT_BLANK"
    ]  # fmt: skip
    assert feature_spec(path) is not None
    assert parse(tokens, token=None).tenant_tokens[1].tenants == ("globex",)


def test_a_sidecar_is_given_exactly_its_configs_tenant_tokens(tmp_path) -> None:
    from kvcast.serving.sidecar.core import Sidecar

    cfg = parse_config(SidecarConfig, {
        "nodes": NODES, "token": SHARED, "decision_log": {"path": None},
        "tenant_tokens": [entry("KT_ACME"), entry("KT_GLOBEX", "globex")],
    }, "sidecar.yaml")  # fmt: skip
    given = read_tenant_tokens(cfg.tenant_tokens, cfg.token_value, os.environ)
    assert Sidecar(cfg, tenant_tokens=given).tenant_tokens == given
    for wrong in (None, {"acme-s3cret": frozenset({"acme"})},
                  dict(reversed(given.items()))):  # fmt: skip
        with pytest.raises(ValueError, match="do not match the config's 2 tenant_tokens entries"):
            Sidecar(cfg, tenant_tokens=wrong)


@pytest.mark.parametrize(
    ("limits", "burst"),
    [({}, None), ({"max_arrivals_per_s": 100}, 200), ({"max_arrivals_per_s": 2.5}, 5),
     ({"max_arrivals_per_s": 0.1}, 1), ({"max_arrivals_per_s": 100, "burst_arrivals": 7}, 7)],
)  # fmt: skip
def test_an_entry_is_unlimited_by_default_and_its_burst_defaults_to_two_seconds_of_its_rate(
    limits, burst
) -> None:
    (token,) = parse([entry("KT_ACME") | limits]).tenant_tokens
    assert token.max_arrivals_per_s == limits.get("max_arrivals_per_s")
    assert token.burst == burst


def test_the_cli_refuses_to_start_naming_the_variable_and_never_the_secret(tmp_path) -> None:
    from kvcast.cli.app import app

    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump({"nodes": NODES, "decision_log": {"path": None},
                                    "tenant_tokens": [entry("KT_ACME")]}))  # fmt: skip
    args = ["serve", "sidecar", "--config", str(path)]
    env = {"KVCAST_TOKEN": "acme-s3cret", "KT_ACME": "acme-s3cret"}
    r = CliRunner().invoke(app, args, env=env)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "tenant_tokens[0] (KT_ACME): its token is the shared token" in text, text
    assert "s3cret" not in r.output
    r = CliRunner().invoke(app, args, env={"KVCAST_TOKEN": "", "KT_ACME": "x"})
    assert r.exit_code == 2 and "KVCAST_TOKEN is set but empty" in " ".join(r.output.split())
    unset = {"KVCAST_TOKEN": SHARED, "KT_ACME": None}
    r = CliRunner().invoke(app, args, env=unset)  # type: ignore[arg-type]
    assert r.exit_code == 2
    assert "its token_env KT_ACME is not set" in " ".join(r.output.split()), r.output


def test_sidecar_yaml_documents_tenant_tokens_none_by_default_and_each_key() -> None:
    path = Path(__file__).resolve().parents[3] / "configs" / "serving" / "sidecar.yaml"
    assert load_config(SidecarConfig, path).tenant_tokens == ()
    text = path.read_text()
    assert "\ntenant_tokens: []\n" in text
    for key in TenantTokenConfig.model_fields:
        assert f"#   {key}: " in text, f"configs/serving/sidecar.yaml lacks tenant_tokens.{key}"
