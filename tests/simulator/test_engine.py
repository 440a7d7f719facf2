"""The simulator's physics on hand-made traces and on the bundled sample."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from simtraces import config, tiny_trace

from kvcast.features.events import BlockStored, Event, RequestArrived, TelemetrySample
from kvcast.features.traces import Trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import Simulator, simulate
from kvcast.simulator.model_scorer import is_model_policy
from kvcast.simulator.policies import policy_names
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision

# the model policies need a trained model: tests/simulator/test_model_policies.py runs them
BASELINES = [n for n in policy_names() if not is_model_policy(n)]


def test_fully_cached_request_recomputes_at_most_its_last_block() -> None:
    blocks = [1, 2, 3, 4, 5]
    tr = tiny_trace([(0.0, 2400, 1, blocks), (60_000.0, 2400, 1, blocks)])
    res = simulate(tr, config(nodes=1, arrival_spread="off"), "round_robin")
    second = res.requests.iloc[1]
    assert second["cached_blocks"] == 4
    assert second["recomputed_tokens"] == 2400 - 4 * 512 <= 512


def test_ttft_is_queue_plus_transfer_plus_prefill_and_prefill_matches_the_model() -> None:
    cfg = config(nodes=1, arrival_spread="off")
    tr = tiny_trace([(0.0, 4000, 1, list(range(8))), (0.0, 4000, 1, list(range(100, 108)))])
    res = simulate(tr, cfg, "round_robin").requests
    p = cfg.node.prefill
    first = res.iloc[0]
    assert first["ttft_ms"] == pytest.approx(
        p.a_ms + p.b_ms_per_token * 4000 + p.c_ms_per_token2 * 4000**2
    )
    # the second arrived while the first's iteration ran: it joins at the next step boundary
    second = res.iloc[1]
    assert second["prefill_start_ms"] == pytest.approx(first["first_token_ms"])
    assert second["queue_ms"] == pytest.approx(first["ttft_ms"])
    parts = res["queue_ms"] + res["transfer_ms"]
    assert (res["ttft_ms"] >= parts).all()


def test_a_long_prompt_is_chunked_and_pays_the_per_iteration_cost() -> None:
    cfg = config(nodes=1, arrival_spread="off")
    n = 20_000
    res = simulate(tiny_trace([(0.0, n, 1, list(range(40)))]), cfg, "round_robin").requests
    p = cfg.node.prefill
    iterations = -(-n // p.chunk_tokens)
    assert res["ttft_ms"].iloc[0] == pytest.approx(
        iterations * p.a_ms + p.b_ms_per_token * n + p.c_ms_per_token2 * n * n
    )


def test_requests_queue_fifo_behind_a_busy_node() -> None:
    cfg = config(nodes=1, arrival_spread="off")
    tr = tiny_trace([(0.0, 8192, 1, list(range(16))), (1.0, 100, 1, [99])])
    res = simulate(tr, cfg, "round_robin").requests
    assert res["queue_ms"].iloc[1] > 0
    assert res["prefill_start_ms"].iloc[1] >= res["first_token_ms"].iloc[0]


@pytest.mark.parametrize("policy", BASELINES)
def test_every_baseline_routes_every_request_exactly_once(policy: str, bundled_head: Trace) -> None:
    seen: Counter[str] = Counter()

    def watch(ev: Event) -> None:
        if isinstance(ev, RequestArrived):
            seen[ev.request_id] += 1

    res = simulate(bundled_head, SimConfig(), policy, observers=[watch])
    assert set(seen) == set(bundled_head.requests["request_id"])
    assert set(seen.values()) == {1}
    assert res.requests["node"].between(0, 7).all()
    assert res.requests["first_token_ms"].notna().all()


def test_capacity_is_never_exceeded_under_heavy_eviction(bundled_head: Trace) -> None:
    cfg = config(node={"kv_capacity_gib": 30.0, "dram": {"capacity_gib": 10.0}})
    worst: list[int] = []
    sim: Simulator

    def watch(ev: Event) -> None:
        worst.append(max(n.pool.used - n.pool.capacity for n in sim.nodes))

    sim = Simulator(bundled_head, cfg, "mooncake_conductor", time_scale=2.0, observers=[watch])
    res = sim.run()
    assert max(worst) <= 0
    assert (res.timeline["used_bytes"] <= cfg.kv_capacity_bytes()).all()
    assert res.timeline["evictions_total"].max() > 0  # the test did exercise eviction
    for n in sim.nodes:
        assert len(n.pool.dram) <= n.pool.dram_capacity


def test_cache_aware_policy_beats_round_robin_on_prefix_hits(bundled: Trace) -> None:
    rr = simulate(bundled, SimConfig(), "round_robin").summary["prefix_hit_ratio"]
    for policy in ("sglang_cache_aware", "llmd_precise", "prefix_sticky"):
        assert simulate(bundled, SimConfig(), policy).summary["prefix_hit_ratio"] > rr


def test_same_trace_config_and_seed_give_identical_results(bundled_head: Trace) -> None:
    a = simulate(bundled_head, SimConfig(), "dynamo_kv", time_scale=2.0)
    b = simulate(bundled_head, SimConfig(), "dynamo_kv", time_scale=2.0)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)


def test_mooncake_pull_moves_bytes_on_the_critical_path(bundled_head: Trace) -> None:
    res = simulate(bundled_head, SimConfig(), "mooncake_conductor", time_scale=2.0)
    rq = res.requests
    pulled = rq[rq["transferred_blocks"] > 0]
    assert res.summary["bytes_pulled"] > 0 and len(pulled) > 0
    assert (pulled["transfer_ms"] > 0).all()
    assert (rq.loc[rq["transferred_blocks"] == 0, "transfer_ms"] == 0).all()


def test_lower_tier_hits_pay_load_time_and_save_recompute() -> None:
    blocks_a, blocks_b = list(range(10)), list(range(100, 110))
    tr = tiny_trace(
        [(0.0, 5000, 1, blocks_a), (10_000.0, 5000, 1, blocks_b), (20_000.0, 5000, 1, blocks_a)]
    )
    cfg = config(
        nodes=1,
        arrival_spread="off",
        node={"kv_capacity_gib": 12 * 0.15625, "dram": {"capacity_gib": 100.0}},
    )
    rq = simulate(tr, cfg, "round_robin").requests
    third = rq.iloc[2]
    assert third["lower_tier_blocks"] > 0
    assert third["recomputed_tokens"] < 5000
    assert third["prefill_start_ms"] - third["arrival_ms"] == pytest.approx(0.0)


def test_event_stream_reports_stored_blocks_and_telemetry(bundled_head: Trace) -> None:
    kinds: Counter[str] = Counter()
    stored: set[int] = set()

    def watch(ev: Event) -> None:
        kinds[type(ev).__name__] += 1
        if isinstance(ev, BlockStored) and ev.medium == "GPU":
            stored.update(ev.block_hashes)

    simulate(bundled_head, SimConfig(), "dynamo_kv", observers=[watch])
    assert kinds["TelemetrySample"] >= 8 * 100
    every_block = {b for bl in bundled_head.requests["block_hashes"] for b in bl}
    assert every_block <= stored


def test_telemetry_samples_are_periodic_per_node(bundled_head: Trace) -> None:
    samples: list[TelemetrySample] = []
    simulate(
        bundled_head,
        SimConfig(),
        "round_robin",
        observers=[lambda e: samples.append(e) if isinstance(e, TelemetrySample) else None],
    )
    t0 = [s.ts_ms for s in samples if s.node == 0]
    assert np.allclose(np.diff(t0), 1000.0)


def test_length_aware_slo_is_floor_plus_factor_times_isolated_prefill() -> None:
    cfg = SimConfig()
    tr = tiny_trace([(0.0, 3000, 1, [1, 2, 3, 4, 5, 6])])
    rq = simulate(tr, cfg, "round_robin").requests
    assert rq["slo_ms"].iloc[0] == pytest.approx(100.0 + 2.0 * cfg.node.prefill.isolated_ms(3000))


def test_absolute_slo_uses_the_configured_ttft() -> None:
    cfg = config(slo={"mode": "absolute", "ttft_ms": 123.0})
    rq = simulate(tiny_trace([(0.0, 3000, 1, [1])]), cfg, "round_robin").requests
    assert rq["slo_ms"].iloc[0] == 123.0
    assert simulate(tiny_trace([(0.0, 3000, 1, [1])]), cfg, "round_robin").summary["slo"] == {
        "ttft_ms": 123.0
    }


def test_a_request_larger_than_a_node_is_rejected_not_hung() -> None:
    cfg = config(nodes=1, node={"kv_capacity_gib": 1.0})
    tr = tiny_trace([(0.0, 512 * 20, 1, list(range(20))), (1.0, 512, 1, [99])])
    res = simulate(tr, cfg, "round_robin")
    assert res.requests["rejected"].tolist() == [True, False]
    assert res.summary["rejected"] == 1 and res.summary["slo_attainment"] == 0.5


def test_time_scale_compresses_arrivals(bundled_head: Trace) -> None:
    a = simulate(bundled_head, SimConfig(), "round_robin").requests["arrival_ms"]
    b = simulate(bundled_head, SimConfig(), "round_robin", time_scale=2.0).requests["arrival_ms"]
    assert np.allclose(b.to_numpy(), a.to_numpy() / 2.0)


@pytest.mark.parametrize("how", ["arrivals", "sessions"])
def test_the_configured_load_scaling_sets_the_replayed_arrivals(how: str) -> None:
    # two conversations on a shared root, 10 s between turns, the second starting at 60 s
    rows = [(0.0, 1500, 10, [0, 1, 2]), (60_000.0, 1500, 10, [0, 5, 6]),
            (10_000.0, 2000, 10, [0, 1, 3, 4]), (70_000.0, 2000, 10, [0, 5, 7, 8])]  # fmt: skip
    trace = tiny_trace(sorted(rows))
    res = simulate(trace, config(load_scaling=how), "least_loaded", time_scale=2.0)
    got = sorted(res.requests["arrival_ms"].tolist())
    assert res.summary["load_scaling"] == how
    if how == "arrivals":  # the think time halves with everything else
        assert got == [0.0, 5_000.0, 30_000.0, 35_000.0]
    else:  # twice the conversations: the recorded ones, and one more replay of each
        df = res.requests.set_index("request_id")["arrival_ms"]
        assert len(df) == 8 and all(f"{i}~1" in df.index for i in range(4))
        assert [df[str(i)] for i in range(4)] == [0.0, 10_000.0, 60_000.0, 70_000.0]
        replayed = [df[f"{i}~1"] for i in range(4)]  # 0, 1: one conversation; 2, 3: the other
        assert replayed[1] - replayed[0] == replayed[3] - replayed[2] == 10_000.0


class Scripted:
    """Routes request i as its scripted decision says (a test router, not a mock)."""

    name = "scripted"

    def __init__(self, decisions: list[RoutingDecision]) -> None:
        self.decisions = list(decisions)
        self.seen: list[float] = []  # node 0's estimated queue at each routing call

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        self.seen.append(ctx.nodes[0].est_queue_ms)
        return self.decisions.pop(0)


def test_the_estimated_queue_counts_the_running_iteration_once() -> None:
    cfg = config(nodes=1, arrival_spread="off")
    iso = cfg.node.prefill.isolated_ms(8000)  # one iteration (8,000 < the 8,192 chunk)
    # B arrives half-way through A's only iteration: it waits the other half, no more
    tr = tiny_trace([(0.0, 8000, 1, list(range(16))), (iso / 2, 100, 1, [999])])
    router = Scripted([RoutingDecision(node=0)] * 2)
    rq = simulate(tr, cfg, router).requests
    assert rq["prefill_start_ms"].iloc[1] - rq["arrival_ms"].iloc[1] == pytest.approx(iso / 2)
    assert router.seen[1] == pytest.approx(iso / 2)


def test_a_request_held_back_by_a_pulls_pins_starts_once_the_pull_lands() -> None:
    # 12 blocks per node; Y on node 1 needs room that node 0's pull from node 1 pins
    cfg = config(nodes=2, arrival_spread="off", node={"kv_capacity_gib": 12 * 0.15625})
    a, y = list(range(10)), list(range(100, 111))
    tr = tiny_trace([(0.0, 10 * 512, 1, a), (10_000.0, 10 * 512, 1, a),
                     (10_001.0, 11 * 512, 1, y)])  # fmt: skip
    pull = RoutingDecision(node=0, pull_from=1, pull_blocks=10)
    router = Scripted([RoutingDecision(node=1), pull, RoutingDecision(node=1)])
    hour = 3_600_000.0

    def stop_if_hung(ev: Event) -> None:
        if isinstance(ev, TelemetrySample) and ev.ts_ms > hour:  # the run would never end
            raise AssertionError("request Y never started")

    rq = Simulator(tr, cfg, router, observers=[stop_if_hung]).run().requests
    assert rq["transferred_blocks"].iloc[1] == 10 and rq["first_token_ms"].notna().all()


def test_spread_arrivals_stay_in_time_order() -> None:
    # 0 (x4), 500, then a 3 s grid: the detected quantum (3 s, the median gap) would spread
    # the first group past 500 ms
    ts = [0.0] * 4 + [500.0] + [3000.0] * 2 + [6000.0] * 2 + [9000.0] * 2 + [12000.0] * 2
    tr = tiny_trace([(t, 600, 5, [1000 + i, 2000 + i]) for i, t in enumerate(ts)])
    rq = simulate(tr, config(nodes=1, seed=0), "round_robin").requests
    assert (np.diff(rq["arrival_ms"].to_numpy()) >= 0).all()
    by_arrival = rq.sort_values("arrival_ms", kind="stable")
    assert (np.diff(by_arrival["prefill_start_ms"].to_numpy()) >= 0).all()  # FIFO holds


def test_goodput_counts_the_seconds_until_the_last_first_token_not_the_arrivals_span() -> None:
    """Three requests 40 ms apart whose first tokens come most of a second later: goodput is the SLO
    met per second of the whole window (it read 75 rps on the arrivals' 40 ms alone), and a
    burst at one instant has a goodput (it had none)."""
    cfg = config(nodes=1, arrival_spread="off")
    rows = [(t, 4000, 1, list(range(k * 100, k * 100 + 8))) for k, t in enumerate((0.0, 0.0, 40.0))]
    res = simulate(tiny_trace(rows), cfg, "round_robin")
    req = res.requests
    window_s = (req["first_token_ms"].max() - req["arrival_ms"].min()) / 1000
    assert window_s > 10 * 0.040  # far longer than the arrivals' 40 ms
    assert res.summary["goodput_rps"] == pytest.approx(req["slo_ok"].sum() / window_s)
    burst = simulate(tiny_trace(rows[:2]), cfg, "round_robin")
    assert np.isfinite(burst.summary["goodput_rps"])


class Watching(Scripted):
    """Routes as scripted and keeps, at each routing, node 0's in-flight prefill tokens and
    active blocks (what Dynamo's router reads)."""

    def __init__(self, decisions: list[RoutingDecision]) -> None:
        super().__init__(decisions)
        self.loads: list[tuple[int, set[int]]] = []

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        node = ctx.nodes[0]
        self.loads.append((node.inflight_prefill_tokens, set(node.active_blocks)))
        return super().route(ctx)


def test_a_nodes_inflight_prefill_and_active_blocks_follow_its_requests() -> None:
    """In-flight prefill tokens: those predicted at routing (the prompt less the node's cached
    prefix then), until the first token; active blocks: every prompt block of the requests
    routed and not finished, prefilling or decoding, each once."""
    cfg = config(nodes=1, arrival_spread="off")
    iso = cfg.node.prefill.isolated_ms(4000)
    a, b = list(range(8)), [0, 1, 2, 3, 100, 101]
    tr = tiny_trace([
        (0.0, 4000, 2000, a),  # prefills until iso, then decodes 2,000 tokens (~60 s)
        (1.0, 3000, 1, b),  # routed while A prefills: nothing cached yet
        (iso + 5_000.0, 1000, 1, [7, 8]),  # A decodes, B is done
        (600_000.0, 100, 1, [9]),  # all done
    ])  # fmt: skip
    router = Watching([RoutingDecision(node=0)] * 4)
    simulate(tr, cfg, router)
    assert router.loads[0] == (0, set())
    assert router.loads[1] == (4000, set(a))
    assert router.loads[2] == (0, set(a))  # A decoding: its blocks active, none in prefill
    assert router.loads[3] == (0, set())


def test_a_request_waiting_for_its_pull_counts_in_its_nodes_queue_estimate() -> None:
    """A router that pulls (Mooncake's conductor) has given the node that work: the next
    request routed while the pull is in flight sees its estimate in the node's queue."""
    cfg = config(nodes=2, arrival_spread="off")
    a = list(range(10))
    tr = tiny_trace([(0.0, 10 * 512, 1, a), (10_000.0, 10 * 512, 1, a), (10_000.5, 512, 1, [99])])
    pull = RoutingDecision(node=0, pull_from=1, pull_blocks=10)
    router = Scripted([RoutingDecision(node=1), pull, RoutingDecision(node=1)])
    rq = simulate(tr, cfg, router).requests
    assert rq["transferred_blocks"].iloc[1] == 10
    assert rq["arrival_ms"].iloc[2] < rq["prefill_start_ms"].iloc[1]  # the pull still in flight
    waiting = cfg.node.prefill.isolated_ms(10 * 512)  # its estimate, made as it was routed
    assert router.seen[2] == pytest.approx(waiting)  # node 0 (idle otherwise): that estimate


@pytest.mark.parametrize(("policy", "view"), [("sglang_cache_aware", "router"),
                                               ("aibrix_prefix", "router"),
                                               ("sglang_cache_aware", "engine"),
                                               ("sglang_cache_aware", "both"),
                                               ("aibrix_prefix", "both")])  # fmt: skip
def test_a_burst_on_one_prefix_follows_the_routers_own_index(policy: str, view: str) -> None:
    """Four requests 5 ms apart on a 12-block prefix: a router that indexes prefixes as it
    routes (alone or with the engines' KV events) sends them all where it sent the first
    (none computed yet); read from the engines' caches alone (empty until a prefill ends)
    they spread over the idle nodes. The summary names the view."""
    cfg = config(nodes=4, arrival_spread="off", routing={policy: {"prefix_view": view}})
    prefix = list(range(12))
    tr = tiny_trace([(5.0 * i, 13 * 512, 1, [*prefix, 100 + i]) for i in range(4)])
    res = simulate(tr, cfg, policy)
    nodes = res.requests["node"].tolist()
    assert nodes == ([0, 1, 2, 3] if view == "engine" else [0, 0, 0, 0])
    assert res.summary["prefix_view"] == view


def test_the_prefix_hit_ratio_is_over_the_served_requests_blocks() -> None:
    """A rejected request reads no cache: its blocks are not in the ratio's denominator
    (they were, which lowered every policy's ratio by the rejections it made)."""
    cfg = config(nodes=1, arrival_spread="off", node={"kv_capacity_gib": 1.0})
    five = list(range(5))
    tr = tiny_trace([(0.0, 5 * 512, 1, five), (60_000.0, 5 * 512, 1, five),
                     (60_001.0, 512 * 20, 1, list(range(100, 120)))])  # fmt: skip
    res = simulate(tr, cfg, "round_robin")
    assert res.requests["rejected"].tolist() == [False, False, True]
    assert res.summary["prefix_hit_ratio"] == pytest.approx(4 / 10)  # 4 of 5 read, twice 5


def test_a_prefix_already_on_its_way_to_a_node_is_waited_for_not_pulled_again() -> None:
    """Two requests on one prefix routed 5 ms apart to node 0, each told to pull it from node
    1 (Mooncake's conductor would): the second waits for the first's pull, which moves the
    blocks once (they were pulled once per request)."""
    cfg = config(nodes=2, arrival_spread="off")
    a = list(range(10))
    tr = tiny_trace([(0.0, 10 * 512, 1, a), (10_000.0, 11 * 512, 1, [*a, 50]),
                     (10_005.0, 11 * 512, 1, [*a, 51])])  # fmt: skip
    pull = RoutingDecision(node=0, pull_from=1, pull_blocks=10)
    res = simulate(tr, cfg, Scripted([RoutingDecision(node=1), pull, pull]))
    rq = res.requests
    block = cfg.block_bytes(512)
    assert res.summary["bytes_pulled"] == 10 * block  # once, not twice
    assert rq["transferred_blocks"].tolist()[1:] == [10, 10]
    assert rq["ready_ms"].iloc[2] == pytest.approx(rq["ready_ms"].iloc[1])  # when it landed
    assert rq["cached_blocks"].tolist()[1:] == [10, 10]  # both read the pulled prefix


def test_the_pulls_under_way_are_forgotten_once_they_land(bundled_head: Trace) -> None:
    """What the simulator keeps of reactive pulls follows those under way, not the trace."""
    sim = Simulator(bundled_head, SimConfig(), "mooncake_conductor", time_scale=2.0)
    sim.run()
    assert sim.replication["bytes_pulled"] > 0 and len(sim.pulls) == 0
