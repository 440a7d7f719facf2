"""Loads and inputs an evaluation cannot use are refused in one line naming the value, before
any simulation; a capacity search that stops at an edge of its range says so."""

from __future__ import annotations

import dataclasses
import re

import pytest

import kvcast.simulator.evaluation as evaluation
from kvcast.config import ConfigError, parse_config, with_overrides
from kvcast.features.traces import Trace
from kvcast.simulator.config import SimConfig, SLOConfig
from kvcast.simulator.engine import simulate
from kvcast.simulator.evaluation import evaluate
from kvcast.simulator.load import LoadOutOfRange

SESSIONS = with_overrides(SimConfig(), load_scaling="sessions")


def first(trace: Trace, n: int) -> Trace:
    return dataclasses.replace(trace, requests=trace.requests.iloc[:n].reset_index(drop=True))


def test_a_sessions_load_that_draws_no_session_is_refused_naming_factor_and_sessions(
    bundled_head: Trace,
) -> None:
    five = first(bundled_head, 5)
    with pytest.raises(LoadOutOfRange, match=r"time-scale 0.01 .* none of the trace's 5 sessions"):
        simulate(five, SESSIONS, "round_robin", time_scale=0.01)


def test_a_sessions_load_too_large_to_hold_is_refused_before_scaling(bundled_head: Trace) -> None:
    with pytest.raises(LoadOutOfRange, match=r"time-scale 1e\+09 .* use a smaller time-scale"):
        simulate(first(bundled_head, 5), SESSIONS, "round_robin", time_scale=1e9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_scales": [0.0]}, "time-scale must be a positive finite number, got 0.0"),
        ({"time_scales": [-2.0]}, "got -2.0"),
        ({"time_scales": [float("nan")]}, "got nan"),
        ({"time_scales": [1.0, 1]}, "time-scales: 1.0 is given twice"),
        ({"policies": ["round_robin", "round_robin"]}, "policies: 'round_robin' is given twice"),
        ({"policies": ["round_robn"]}, "unknown routing policy 'round_robn'"),
        ({"slos": [SLOConfig(mode="absolute", ttft_ms=500)] * 2}, "SLOs: 'absolute 500 ms'"),
        ({"cfg": SESSIONS, "time_scales": [1.0, 0.01]}, "time-scale 0.01 with load_scaling"),
        ({"cfg": with_overrides(SimConfig(), arrival_spread=1e30)}, r"arrival_spread 1e\+30"),
    ],
)
def test_evaluate_refuses_unusable_input_before_any_simulation(
    bundled_head: Trace, monkeypatch: pytest.MonkeyPatch, kwargs: dict, message: str
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(evaluation, "simulate", lambda *a, **k: ran.append(a))
    args = {"cfg": SimConfig(), "policies": ["round_robin"], "time_scales": [1.0]} | kwargs
    trace = first(bundled_head, 5)
    with pytest.raises(ValueError, match=message):
        evaluate(trace, args.pop("cfg"), args.pop("policies"), args.pop("time_scales"), **args)
    assert ran == []


def test_evaluate_refuses_an_empty_trace_slice(bundled_head: Trace) -> None:
    with pytest.raises(ValueError, match="has no requests"):
        evaluate(first(bundled_head, 0), SimConfig(), ["round_robin"])


def test_capacity_keys_flag_a_search_that_stopped_at_either_limit(bundled_head: Trace) -> None:
    trace = first(bundled_head, 40)
    loose, tight = SLOConfig(mode="absolute", ttft_ms=1e7), SLOConfig(mode="absolute", ttft_ms=1)
    ev = evaluate(trace, SimConfig(), ["round_robin"], capacity=True, slos=[loose, tight])
    got = [
        (s["capacity_time_scale"], s["capacity_bound"], s["capacity_bound_time_scale"])
        for s in ev.summaries
    ]
    assert got == [(256.0, "upper", 256.0), (0.0, "lower", 1 / 64)]


def test_a_sessions_capacity_search_stops_where_no_session_is_drawn(bundled_head: Trace) -> None:
    cfg = with_overrides(SESSIONS, slo={"mode": "absolute", "ttft_ms": 1})
    ev = evaluate(first(bundled_head, 5), cfg, ["round_robin"], capacity=True)
    (s,) = ev.summaries
    assert s["capacity_time_scale"] == 0.0 and s["capacity_bound"] == "lower"
    assert s["capacity_bound_time_scale"] > 1 / 64  # stopped before the search's own limit
    (cap,) = ev.capacity.values()
    assert cap.note is not None and "drew none of the trace's 5 sessions" in cap.note
    assert s["slo_attainment"] == s["slo_attainment"]  # no NaN


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"node": {"kv_capacity_gib": float("inf")}}, "node.kv_capacity_gib"),
        ({"node": {"hbm_gib_per_gpu": float("inf")}}, "node.hbm_gib_per_gpu"),
        ({"node": {"dram": {"capacity_gib": float("inf")}}}, "node.dram.capacity_gib"),
        ({"node": {"decode": {"step_ms": float("inf")}}}, "node.decode.step_ms"),
        ({"node": {"prefill": {"a_ms": float("inf")}}}, "node.prefill"),
        ({"arrival_spread": float("inf")}, "arrival_spread"),
        ({"arrival_spread": float("nan")}, "arrival_spread"),
        ({"arrival_spread": -5.0}, "arrival_spread"),
        ({"seed": -1}, "seed"),
    ],
)
def test_a_simulator_config_refuses_numbers_no_run_can_use_naming_the_key(
    override: dict, key: str
) -> None:
    # each of these ended in a traceback (int(inf)), a run that never ends (an infinite
    # prefill or decode step) or numpy's unnamed "expected non-negative integer"
    with pytest.raises(ConfigError, match=rf"key '{re.escape(key)}[.']"):
        parse_config(SimConfig, override, source="sim.yaml")


def test_an_arrival_spread_that_stretches_the_trace_past_the_limit_is_refused(
    bundled_head: Trace,
) -> None:
    cfg = with_overrides(SimConfig(), arrival_spread=1e30)
    with pytest.raises(LoadOutOfRange, match=r"time-scale 1.0 .*arrival_spread 1e\+30 ms"):
        simulate(first(bundled_head, 20), cfg, "round_robin")


def test_a_decider_tick_too_short_for_the_trace_is_refused_not_run_for_hours(
    bundled_head: Trace,
) -> None:
    from kvcast.predictor.decider_config import DeciderConfig
    from kvcast.simulator.replication_policies import make_policy

    cfg = SimConfig()
    decider = parse_config(DeciderConfig, {"loop": {"tick_ms": 0.001}})
    policy = make_policy("oracle", cfg, decider, {})
    with pytest.raises(LoadOutOfRange, match=r"loop\.tick_ms\) of 0\.001 ms .* over 1,000,000"):
        simulate(first(bundled_head, 20), cfg, policy)


@pytest.mark.parametrize(
    ("router", "what"),
    [("nope", "is unknown"), ("oracle", "is a replicating policy, not a router")],
)
def test_a_decider_base_router_must_be_a_router_naming_the_key_and_the_valid_ones(
    router: str, what: str
) -> None:
    from kvcast.predictor.decider_config import DeciderConfig
    from kvcast.simulator.replicating_policy import base_routers, check_base_router

    assert {"dynamo_kv", "mooncake_conductor"} <= set(base_routers())
    assert "oracle" not in base_routers()
    decider = parse_config(DeciderConfig, {"loop": {"router": router}})
    with pytest.raises(ValueError, match=rf"d\.yaml: key 'loop\.router': '{router}' {what}; "
                                         r"valid: .*dynamo_kv"):  # fmt: skip
        check_base_router(decider, "d.yaml")


def test_a_span_made_by_one_stray_timestamp_names_the_request(bundled_head: Trace) -> None:
    t = first(bundled_head, 30)
    reqs = t.requests.copy()
    reqs.loc[12, "arrival_ms"] = 1.7e12  # unix ms among relative ones
    stray = reqs.loc[12, "request_id"]
    t = dataclasses.replace(t, requests=reqs.sort_values("arrival_ms").reset_index(drop=True))
    with pytest.raises(LoadOutOfRange, match=rf"check the trace's timestamps: request "
                                             rf"'{stray}' \(at 1\.7e\+12 ms\) arrives .* after "
                                             r"the rest"):  # fmt: skip
        simulate(t, SimConfig(), "round_robin")


@pytest.mark.parametrize(
    ("policy", "bound"),
    [("round_robin", "5 telemetry periods"), ("oracle", "the decider's 5 ticks of 500 ms")],
)
def test_requests_that_outlast_their_arrivals_past_the_bound_stop_the_run_with_why(
    monkeypatch: pytest.MonkeyPatch, policy: str, bound: str
) -> None:
    """The arrivals' span (10 ms) passes the checks made before the run, but each request's
    prefill runs for many seconds: the telemetry periods (and the decider's ticks) past the bound
    stop the run with one line saying why, instead of running for hours."""
    from simtraces import tiny_trace

    import kvcast.simulator.engine as engine
    import kvcast.simulator.replication_hooks as hooks
    from kvcast.simulator.replication_policies import make_policy

    monkeypatch.setattr(engine, "MAX_TELEMETRY_PERIODS", 5)
    monkeypatch.setattr(hooks, "MAX_TELEMETRY_PERIODS", 5)
    rows = [(t, 120_000, 1, list(range(k * 1000, k * 1000 + 235))) for k, t in enumerate((0, 10))]
    cfg = SimConfig()
    why = rf"the run went on for {bound}.* after the last arrival .* with \d+ requests? still"
    with pytest.raises(LoadOutOfRange, match=why):
        simulate(tiny_trace(rows), cfg, make_policy(policy, cfg))


def test_a_trace_just_inside_the_bound_runs_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals over 4.5 of 5 periods pass the check made before the run; the run-time bound
    counts the periods after the last arrival, so the run is not cut off at its end."""
    from simtraces import tiny_trace

    import kvcast.simulator.engine as engine
    import kvcast.simulator.load as load
    import kvcast.simulator.replication_hooks as hooks

    for module in (engine, load, hooks):
        monkeypatch.setattr(module, "MAX_TELEMETRY_PERIODS", 5)
    rows = [(0.0, 512, 1, [1]), (2000.0, 512, 1, [2]), (4500.0, 512, 1, [3])]
    cfg = with_overrides(SimConfig(), arrival_spread="off")
    res = simulate(tiny_trace(rows), cfg, "round_robin")
    assert res.summary["requests"] == 3 and res.summary["rejected"] == 0
