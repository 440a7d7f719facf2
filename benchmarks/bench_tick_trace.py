"""The decision loop's tick on a feature state shaped by a real trace; prints one JSON object.

``bench_sidecar.py`` times the tick on a small synthetic state (128 chains of 8 blocks, each
with 4 sessions, after 4,096 requests). A live sidecar's state is larger and more shared: here
it is built as ``load_sidecar.py`` loads a real sidecar, from the conversation trace at
``--factor`` x its busiest second, one new session per request, its blocks stored on the
request's node and the blocks stored 64 requests earlier removed there (so root blocks that
many requests share carry thousands of sessions), for ``--warm-s`` seconds before the first
tick; then one tick untimed (a live loop has ticked all along: the first one's one-off costs
are not the steady state's) and ``--ticks`` ticks 250 ms apart with the requests of those 250
ms before each. After each batch of requests the consumer's idle step runs (the runs they
changed packed, as a live consumer does whenever its queue is empty).
The candidates are the sidecar's own (the newest chains within the lookback), before each
tick as few of them as hold at least ``--blocks`` distinct blocks.

Each tick is :meth:`DecisionLoop.tick` itself, in shadow mode without logs: the snapshot
(here on the calling thread: the consumer is not started), ONNX scoring, the cluster view,
the routed requests settled and the decider with its ledger kept: per-thread CPU time (the
machines are shared; wall time beside it). Same-run baseline: the same loop on
``bench_sidecar.py``'s synthetic state. Also printed: the warm-up's KV events and arrivals
applied per CPU second (the consumer's ``apply`` and idle step, on this shape of traffic),
and the tick's parts as the loop's own timers see them (``parts_wall_ms``: feature rows,
scoring, decide).

    python benchmarks/bench_tick_trace.py [--ticks 300] [--warm-s 60] [--factor 10]
                                          [--blocks 1024] [--trace PATH] [--model PATH]

Goal (issue 6): a tick over 1,024 candidate blocks <= 2 ms p99.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
from bench_sidecar import NODES, cluster, live_view, logistic_model, ms, telemetry_for
from trace_load import DEV_TRACE, Load, peak_rate

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.chain_codes import distinct_blocks
from kvcast.features.online.state import FeatureState
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.decision_loop import DecisionLoop, TickTimers
from kvcast.serving.sidecar.decisions import RecentDecisions
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.live_view import LiveView
from kvcast.serving.sidecar.model_slot import ModelSlot
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.recent_chains import RecentChains
from kvcast.serving.sidecar.replicas import ReplicaTracker


class Timings:
    """Stands in for a tick histogram: keeps each observation (seconds)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def observe(self, value: float) -> None:
        self.seconds.append(value)


PARTS = ("features", "scoring", "decide")
TICK_MS = 250.0
STALE_S = 3600.0  # the nodes' telemetry, set once, holds for the whole run
Feed = Callable[[float], None]  # applies the requests that arrive before a tick at ``t``


def candidate_blocks(keeper: StateKeeper, t: float) -> int:
    """The distinct blocks of the chains the keeper's candidates are at ``t``."""
    return len(distinct_blocks(keeper.chains.candidates(t, 0).chains)[0])


def trace_state(
    cfg: FeatureConfig, trace: Any, factor: float, warm_s: float, blocks: int
) -> tuple[StateKeeper, float, Feed, float]:
    """A keeper whose state has seen ``warm_s`` seconds of ``trace`` at ``factor`` x its peak
    rate, ``feed(t)``: the requests up to ``t``, and the warm-up's events applied per CPU
    second. Candidates: the sidecar's own rule, the newest chains, as few of them as hold
    ``blocks`` distinct blocks at ``t`` (chain lengths vary from 2 to 241 blocks: a fixed
    count would not)."""
    loop = DeciderConfig().loop
    chains = RecentChains(loop.lookback_ms, loop.max_candidates, cfg.block_tokens)
    keeper = StateKeeper(FeatureState(cfg), EventQueue(1 << 20), chains, ReplicaTracker(),
                         NodeLoads(cfg.nodes, cfg.prefill, STALE_S))  # fmt: skip
    load = Load(trace, [], factor * peak_rate(trace)[0], nodes=cfg.nodes)
    t0 = 1.7e12

    applied = [0.0]  # CPU seconds in ``keeper.apply``

    def feed(t: float) -> None:
        events: list[Any] = []
        for i in load.due((t - t0) / 1000.0):
            ts = t0 + i / load.rate * 1000.0
            arrivals, per_node = load.build(range(i, i + 1), ts)
            a = arrivals[0]
            events += [e for node_events in per_node for e in node_events]
            events.append(RequestArrived(ts, a["request_id"], a["node"], a["tenant"],
                                         a["session"], a["input_tokens"], a["output_tokens"],
                                         tuple(a["block_hashes"])))  # fmt: skip
        c = time.process_time()
        keeper.apply(events)
        keeper.idle()  # as the consumer does whenever its queue is empty
        applied[0] += time.process_time() - c
        for limit in range(1, loop.max_candidates + 1):  # the fewest chains with ``blocks``
            chains.limit = limit
            if candidate_blocks(keeper, t) >= blocks:
                break

    now = t0 + warm_s * 1000.0
    feed(now)
    keeper.take_routed()  # the warm-up's: not the first tick's (a restarted loop's would be)
    ingestion = keeper.applied / applied[0]
    return keeper, now, feed, ingestion


def time_loop(
    keeper: StateKeeper, view: LiveView, model: str, now: float, feed: Feed, n_ticks: int
) -> dict[str, Any]:
    """``n_ticks`` of a :class:`DecisionLoop` (shadow mode, no logs) from ``now``."""
    slot = ModelSlot(keeper.state.spec)
    slot.load(model)
    clock = [now]
    parts = TickTimers(*(Timings() for _ in fields(TickTimers)))
    loop = DecisionLoop(
        keeper, slot, Decider(claim_in_flight=True), view, mode=lambda: "shadow",
        in_flight=dict, sink=lambda _: None, recent=RecentDecisions(1024), decision_log=None,
        timers=parts, tick_ms=TICK_MS, block_bytes=view.block_bytes,
        tail_tokens=DeciderConfig().loop.default_tail_tokens, sidecar_id="bench",
        clock_ms=lambda: clock[0],
    )  # fmt: skip
    # one tick untimed: a live sidecar ticks all through the warm-up, while here the first
    # read would repack every run the warm-up changed at once
    loop.tick()
    for timer in fields(TickTimers):
        getattr(parts, timer.name).seconds.clear()
    cpu, wall, blocks, made = [], [], [], []
    for k in range(n_ticks):
        clock[0] = t = now + TICK_MS * (k + 1)
        feed(t)
        w, c = time.perf_counter(), time.thread_time()
        out = loop.tick()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
        made.append(len(out))
        blocks.append(keeper.ask(lambda kp, t=t: candidate_blocks(kp, t)).result())

    return {
        "candidate_blocks_p50": float(np.median(blocks)),
        "tracked_blocks": len(keeper.state.blocks),
        "commands_per_tick": float(np.mean(made)),
        "tick_cpu_ms": ms(cpu),
        "tick_wall_ms": ms(wall),
        # the loop's own timers (wall; here the snapshot runs on this thread): feature rows,
        # ONNX scoring, cluster view + decider
        "parts_wall_ms": {k: ms(getattr(parts, k).seconds) for k in PARTS},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--warm-s", type=float, default=60.0)
    ap.add_argument("--factor", type=float, default=10.0)
    ap.add_argument("--blocks", type=int, default=1024)
    ap.add_argument("--trace", default=None, help="default: the dev trace, else the bundled one")
    ap.add_argument("--model", default=None, help="an ONNX model (default: a logistic graph)")
    args = ap.parse_args()
    if args.ticks < 1 or args.warm_s <= 0 or args.factor <= 0 or args.blocks < 1:
        raise SystemExit("--ticks and --blocks must be >= 1, --warm-s and --factor > 0")
    from kvcast.cli.common import open_trace

    spec = args.trace or (str(DEV_TRACE) if DEV_TRACE.is_file() else "bundled:conversation")
    trace = open_trace(spec)
    cfg = FeatureConfig(nodes=NODES)
    with tempfile.TemporaryDirectory() as tmp:
        keeper, now, feed, ingestion = trace_state(cfg, trace, args.factor, args.warm_s,
                                                   args.blocks)  # fmt: skip
        telemetry_for(keeper.loads)
        model = args.model or str(logistic_model(Path(tmp) / "m.onnx", keeper.state.spec))
        shaped = time_loop(keeper, live_view(keeper, cfg), model, now, feed, args.ticks)
        base_keeper, base_view, base_now, arrive = cluster(cfg)
        base = time_loop(base_keeper, base_view, model, base_now, arrive, args.ticks)
    out = {"trace": spec, "factor": args.factor, "warm_s": args.warm_s,
           "warm_up_events_applied_per_cpu_s": ingestion, "trace_state": shaped,
           "baseline_synthetic_state": base}  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
