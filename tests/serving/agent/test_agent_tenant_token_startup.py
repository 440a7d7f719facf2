"""Tenant tokens on an agent, at start-up: an agent is handed exactly its config's tenant
tokens; the CLI reads them from their variables and refuses a bad one (unset, blank, with
surrounding whitespace, the shared token's, too long, or without a shared token) naming the
variable, never the secret; a real ``kvcast serve agent`` process enforces them."""

from __future__ import annotations

import os
import secrets

import httpx
import pytest
import yaml
from serve_processes import AGENT_READY, start_agent
from tenant_token_helpers import ACME, SHARED, TOKENS
from typer.testing import CliRunner

from kvcast.serving.agent import Agent


def test_an_agent_is_given_exactly_its_configs_tenant_tokens(config) -> None:
    cfg = config(token=SHARED, tenant_tokens=[{"tenants": ["acme", "initech"],
                                                "token_env": "KT_ACME"}])  # fmt: skip
    assert Agent(cfg, tenant_tokens=TOKENS).tenant_tokens == TOKENS
    for wrong in (None, {ACME: frozenset({"acme"})}, {**TOKENS, "x": frozenset({"y"})}):
        with pytest.raises(ValueError, match="do not match the config's 1 tenant_tokens"):
            Agent(cfg, tenant_tokens=wrong)
    with pytest.raises(ValueError, match="tenant tokens need a shared token"):
        Agent(config(tenant_tokens=cfg.model_dump()["tenant_tokens"]), tenant_tokens=TOKENS)


BASE = ["serve", "agent", "--listen", "127.0.0.1:0", "--transfer-listen", "127.0.0.1:0",
        "--capacity", "64MiB", "--speculative-quota", "8MiB"]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KVCAST_TOKEN": SHARED}, "tenant_tokens[0]: its token_env KT_ACME is not set"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": " "}, "its token_env KT_ACME is empty"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": SHARED},
         "tenant_tokens[0] (KT_ACME): its token is the shared token"),
        ({"KVCAST_TOKEN": SHARED, "KT_ACME": "s3cret" * 400},
         "tenant_tokens[0] (KT_ACME): its token is 2400 bytes (UTF-8), over 2048"),
        ({"KT_ACME": ACME}, "tenant_tokens need a shared token"),
    ],
)  # fmt: skip
def test_the_cli_refuses_a_bad_tenant_token_naming_its_variable_never_the_secret(
    tmp_path, env, message
) -> None:
    from kvcast.cli.app import app

    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"tenant_tokens": [{"tenants": ["acme"],
                                                        "token_env": "KT_ACME"}]}))  # fmt: skip
    full = {"KVCAST_TOKEN": None, "KT_ACME": None} | env
    r = CliRunner().invoke(app, [*BASE, "--config", str(path)], env=full)  # type: ignore[arg-type]
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()), r.output
    assert "s3cret" not in r.output and "Traceback" not in r.output


def test_a_real_agent_process_enforces_its_tenant_tokens(tmp_path) -> None:
    shared, acme = secrets.token_hex(16), secrets.token_hex(16)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"tenant_tokens": [{"tenants": ["acme"],
                                                        "token_env": "KT_ACME"}]}))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("KVCAST_TOKEN", "KT_ACME")}
    env |= {"KVCAST_TOKEN": shared, "KT_ACME": acme}
    seed = ["--seed-blocks", "3", "--seed-tenant", "acme", "--seed-block-bytes", "4096"]
    agent = start_agent("node-a", env, "--config", str(path), *seed)
    try:
        agent.wait_ready(AGENT_READY)
        base, mine = agent.http, {"Authorization": f"Bearer {acme}"}
        with httpx.Client(timeout=10.0) as http:
            r = http.get(f"{base}/v1/inventory", headers=mine)
            assert r.status_code == 200 and len(r.json()["blocks"]) == 3
            assert {b["tenant"] for b in r.json()["blocks"]} == {"acme"}
            h = r.json()["blocks"][0]["block_hash"]
            r = http.post(f"{base}/v1/pin", json={"tenant": "acme", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 403
            r = http.post(f"{base}/v1/evict", json={"tenant": "globex", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 403 and "'globex'" in r.json()["detail"]
            r = http.post(f"{base}/v1/evict", json={"tenant": "acme", "block_hashes": [h]},
                          headers=mine)  # fmt: skip
            assert r.status_code == 200 and r.json()["evicted"] == [h]
            r = http.get(f"{base}/v1/inventory", headers={"Authorization": "Bearer nope"})
            assert r.status_code == 401
        assert "tenant tokens: 1, for tenants ['acme']" in "".join(agent.log)
        # no max_bytes: its uploads may evict other tenants' blocks, and it is said
        assert "tenant tokens without max_bytes (KT_ACME)" in "".join(agent.log)
        assert acme not in "".join(agent.log) and shared not in "".join(agent.log)
    finally:
        agent.kill()
