"""Replicating policies are registered beside the anchors' routers and built by name, each
run with a fresh decider and the simulator's own routing parameters; ``evaluate`` and the CLI
accept their names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.config import parse_config
from kvcast.features.traces import Trace
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.config import SimConfig
from kvcast.simulator.evaluation import evaluate
from kvcast.simulator.policies import UnknownPolicyError, policy_names
from kvcast.simulator.policies.dynamo_kv import DynamoKv
from kvcast.simulator.policies.mooncake_conductor import MooncakeConductor
from kvcast.simulator.replicating_policy import ReplicatingPolicy
from kvcast.simulator.replication_policies import (
    is_replicating,
    make_policy,
    replicating_policy_names,
)


def test_replicating_policies_are_listed_with_the_routers() -> None:
    assert {"oracle", "predictive_recency"} <= set(policy_names())
    assert replicating_policy_names() == [
        "oracle", "predictive_lgbm", "predictive_recency", "predictive_rule", "predictive_tcn"
    ]  # fmt: skip
    assert not is_replicating("dynamo_kv")


def test_make_policy_builds_routers_and_replicating_policies() -> None:
    cfg = SimConfig()
    assert isinstance(make_policy("dynamo_kv", cfg), DynamoKv)
    oracle = make_policy("oracle", cfg)
    assert isinstance(oracle, ReplicatingPolicy) and oracle.replicator is oracle
    assert isinstance(oracle.router, DynamoKv)
    with pytest.raises(UnknownPolicyError, match="oracle"):
        make_policy("orakel", cfg)


def test_the_base_router_comes_from_the_decider_config() -> None:
    dec = parse_config(DeciderConfig, {"loop": {"router": "mooncake_conductor"}})
    policy = make_policy("predictive_recency", SimConfig(), dec)
    assert isinstance(policy, ReplicatingPolicy) and isinstance(policy.router, MooncakeConductor)
    assert policy.inner.reactive_pull


def test_a_replicating_policy_cannot_be_its_own_base_router() -> None:
    with pytest.raises(ValueError, match="'oracle' is a replicating policy, not a router"):
        make_policy(
            "oracle", SimConfig(), parse_config(DeciderConfig, {"loop": {"router": "oracle"}})
        )


def test_evaluate_runs_replicating_policies_by_name(bundled_head: Trace) -> None:
    head = bundled_head.window(0, 60_000)
    ev = evaluate(head, SimConfig(), ["dynamo_kv", "oracle", "predictive_recency"], [1.0])
    assert [s["policy"] for s in ev.summaries] == ["dynamo_kv", "oracle", "predictive_recency"]
    for s in ev.summaries:
        assert s["active_evictions_by_speculative"] == 0
        assert s["peak_speculative_bytes_over_quota"] == 0


def small_trace(tmp_path: Path) -> Path:
    src = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"
    p = tmp_path / "small.jsonl"
    p.write_text("".join(src.read_text().splitlines(keepends=True)[:200]))
    return p


def test_cli_simulates_and_evaluates_replicating_policies(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = str(small_trace(tmp_path))
    r = runner.invoke(app, ["policies"])
    assert r.exit_code == 0 and {"oracle", "predictive_recency"} <= set(r.output.split())
    out = tmp_path / "sim"
    r = runner.invoke(app, ["simulate", "--trace", trace, "--policy", "oracle", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["policy"] == "oracle"
    dec = tmp_path / "decider.yaml"
    dec.write_text("loop:\n  tick_ms: 1000.0\n")
    ev = tmp_path / "ev"
    args = ["evaluate", "--trace", trace, "--policies", "dynamo_kv,oracle,predictive_recency"]
    r = runner.invoke(app, [*args, "--decider-config", str(dec), "--out", str(ev)])
    assert r.exit_code == 0, r.output
    rows = json.loads((ev / "summary.json").read_text())
    assert [s["policy"] for s in rows] == ["dynamo_kv", "oracle", "predictive_recency"]


def test_cli_refuses_a_bad_decider_config_with_one_line(tmp_path: Path) -> None:
    dec = tmp_path / "bad.yaml"
    dec.write_text("budgets:\n  quota: 3\n")
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(small_trace(tmp_path)),
            "--policy",
            "oracle",
            "--decider-config",
            str(dec),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2 and "budgets.quota" in r.output
