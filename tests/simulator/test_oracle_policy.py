"""``oracle``: the decider fed with the future arrivals, through the base router; it acts
ahead of a session's next turn, never breaks the speculative invariants, and beats its router
alone at a loaded time-scale on the bundled sample."""

from __future__ import annotations

import pytest
from simtraces import config, tiny_trace

from kvcast.features.traces import Trace
from kvcast.predictor.commands import ReplicateCommand
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import Simulator, simulate
from kvcast.simulator.oracle import OraclePolicy
from kvcast.simulator.replication_policies import make_policy

A = list(range(1, 21))  # a 20-block conversation prefix
B = A + list(range(100, 280))  # a long follow-up that keeps A's holder busy for ~13 s
C = [*A, 500, 501]  # the next turn, due while the holder is busy


def next_turn_trace() -> Trace:
    return tiny_trace([(0.0, 10_000, 1, A), (3_000.0, 100_000, 1, B), (5_000.0, 11_000, 1, C)])


def test_oracle_copies_the_prefix_to_where_the_next_turn_will_run_before_it_arrives() -> None:
    cfg = config(nodes=2, arrival_spread="off")
    alone = simulate(next_turn_trace(), cfg, "dynamo_kv").requests.iloc[2]
    res = simulate(next_turn_trace(), cfg, make_policy("oracle", cfg))
    turn = res.requests.iloc[2]
    assert alone["cached_blocks"] == 0  # the router sends it away from the busy holder
    assert turn["node"] == alone["node"] and turn["cached_blocks"] == len(A)
    assert turn["ttft_ms"] < alone["ttft_ms"] / 5
    s = res.summary
    assert s["policy"] == "oracle" and s["replications"] == 1
    assert 0.0 < s["mean_lead_time_ms"] < 1_500.0  # landed shortly before the arrival


def test_oracle_commands_carry_the_arrival_as_deadline_and_a_reason() -> None:
    cfg = config(nodes=2, arrival_spread="off")
    policy = make_policy("oracle", cfg)
    assert isinstance(policy, OraclePolicy)
    seen: list[ReplicateCommand] = []
    inner = policy.inner
    tick = inner.on_tick

    def spy(now_ms: float, sim: Simulator) -> list:
        cmds = list(tick(now_ms, sim))
        seen.extend(c for c in cmds if isinstance(c, ReplicateCommand))
        return cmds

    inner.on_tick = spy  # type: ignore[method-assign]
    simulate(next_turn_trace(), cfg, policy, time_scale=2.0)
    assert len(seen) == 1
    cmd = seen[0]
    assert cmd.deadline_ms == pytest.approx(2_500.0)  # C's arrival in the time-scaled trace
    assert cmd.block_hashes == tuple(A) and cmd.reason.p_hit == 1.0


def test_a_simulator_built_by_name_runs_the_policys_replicator(bundled_4min: Trace) -> None:
    res = simulate(bundled_4min, SimConfig(), "oracle", time_scale=2.0)
    assert res.summary["policy"] == "oracle" and res.summary["replications"] > 0


@pytest.fixture(scope="module")
def bundled_4min(bundled: Trace) -> Trace:
    return bundled.window(0, 240_000)


def test_oracle_beats_its_router_at_a_loaded_time_scale(bundled_4min: Trace) -> None:
    cfg = SimConfig()
    alone = simulate(bundled_4min, cfg, "dynamo_kv", time_scale=2.0).summary
    s = simulate(bundled_4min, cfg, make_policy("oracle", cfg), time_scale=2.0).summary
    assert (
        s["ttft_ms"]["p50"] < alone["ttft_ms"]["p50"]
        or s["slo_attainment"] > alone["slo_attainment"]
    )
    # its copies are read where it put them, far more than a model-free predictor's
    recency = simulate(bundled_4min, cfg, make_policy("predictive_recency", cfg), time_scale=2.0)
    assert s["replications"] > 0 and s["copy_fates"]["used"] > 0
    assert s["replication_hit_rate"] > recency.summary["replication_hit_rate"] + 0.1
    assert s["active_evictions_by_speculative"] == 0
    assert s["peak_speculative_bytes_over_quota"] == 0


def test_the_decider_learns_that_its_copy_was_used_where_the_router_sent_the_turn() -> None:
    cfg = config(nodes=2, arrival_spread="off")
    policy = make_policy("oracle", cfg)
    res = simulate(next_turn_trace(), cfg, policy)
    feedback = policy.inner.decider.feedback
    assert res.summary["replications"] == 1
    # the copy of A's chain was settled by C's arrival, on the node it was copied to
    assert (feedback.settled, feedback.used, len(feedback)) == (1, 1, 0)
    assert feedback.factor(5_000.0) == pytest.approx(1.0)  # used as expected (P = 1)
    assert res.summary["copy_fates"] == {
        "used": 1,
        "routed_to_source": 0,
        "routed_elsewhere": 0,
        "expired": 0,
        "unsettled": 0,
    }
    assert "copy_fates" not in simulate(next_turn_trace(), cfg, "dynamo_kv").summary


def test_the_replicator_forgets_copies_its_nodes_evicted_for_room() -> None:
    from kvcast.predictor.budgets import Transfer

    cfg = config(nodes=2, arrival_spread="off")
    policy = make_policy("oracle", cfg)
    sim = Simulator(next_turn_trace(), cfg, policy)
    policy.on_tick(0.0, sim)  # the run starts: a fresh decider
    ledger = policy.inner.decider.ledger
    ledger.record(Transfer(0.0, 1.0, 0, 1, 1, (424242,)), expiry_ms=1e9)
    sim.nodes[1].pool.spec_evicted.append(424242)  # node 1 evicted that copy for room
    policy.on_tick(10.0, sim)
    assert not ledger.has_replica(424242) and sim.nodes[1].pool.spec_evicted == []


def test_a_replicating_policys_summary_names_the_router_it_runs_on() -> None:
    """``base_router``: what ``kvcast verdict`` compares a policy with at low load; absent for
    a plain router."""
    from kvcast.predictor.decider_config import DeciderConfig

    cfg = config(nodes=2, arrival_spread="off")
    on_llmd = DeciderConfig.model_validate({"loop": {"router": "llmd_precise"}})
    s = simulate(next_turn_trace(), cfg, make_policy("oracle", cfg, on_llmd)).summary
    assert s["base_router"] == "llmd_precise"
    assert "base_router" not in simulate(next_turn_trace(), cfg, "dynamo_kv").summary


def test_a_replicating_policys_summary_names_its_routers_prefix_view() -> None:
    """``prefix_view``: which prefixes the base router reads (from ``routing:``); absent for
    a router that matches none (dynamo_kv reads the engines' caches, with no such key)."""
    from kvcast.predictor.decider_config import DeciderConfig

    cfg = config(
        nodes=2, arrival_spread="off", routing={"sglang_cache_aware": {"prefix_view": "both"}}
    )
    on_sglang = DeciderConfig.model_validate({"loop": {"router": "sglang_cache_aware"}})
    s = simulate(next_turn_trace(), cfg, make_policy("oracle", cfg, on_sglang)).summary
    assert (s["base_router"], s["prefix_view"]) == ("sglang_cache_aware", "both")
    assert "prefix_view" not in simulate(next_turn_trace(), cfg, "dynamo_kv").summary
