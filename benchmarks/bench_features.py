"""Feature pipeline speed on the full dev conversation trace; prints one JSON object.

Offline: block events (hashes named by all events) per second and rows per second of
``build_feature_dataset``, from event objects and from a prebuilt event table. Online:
``FeatureState.update`` microseconds per event (and per event type), and ``rows()`` per row.
Each figure sits beside a same-run baseline on the same data (machines are noisy): a numpy
pass that sorts the block accesses once (offline) and a plain Python loop that only walks the
events and their hashes (online). Best of ``--repeat`` runs.

    python benchmarks/bench_features.py [--trace PATH] [--source toy|sim] [--repeat 3]

Goals (issue 3): offline >= 1,000,000 block-events/s on one core; online <= 5 us per event.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event, RequestArrived
from kvcast.features.offline.ingest import event_table
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.online.state import FeatureState
from kvcast.features.toy_replay import toy_events
from kvcast.features.traces import load_trace

DEV_TRACE = Path("/work/shared/traces/mooncake_conversation_dev.jsonl")


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Fastest wall time of ``repeat`` calls (CPU time of this process), and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


def sim_events(trace_path: Path, nodes: int) -> list[Event]:
    from kvcast.simulator.config import SimConfig
    from kvcast.simulator.engine import simulate

    events: list[Event] = []
    cfg = SimConfig().model_copy(update={"nodes": nodes})
    simulate(load_trace(trace_path), cfg, "round_robin", observers=[events.append])
    return events


def walk(events: list[Event]) -> int:
    """Online baseline: iterate the events, dispatch on type and touch every hash."""
    n = 0
    for ev in events:
        for _ in getattr(ev, "block_hashes", ()):
            n += 1
    return n


def online(events: list[Event], cfg: FeatureConfig) -> FeatureState:
    state = FeatureState(cfg)
    update = state.update
    for ev in events:
        update(ev)
    return state


def online_by_type(events: list[Event], cfg: FeatureConfig) -> dict[str, float]:
    """CPU seconds per event type (the clock calls around each update add a little)."""
    state = FeatureState(cfg)
    per_type: dict[str, float] = defaultdict(float)
    clock = time.process_time
    for ev in events:
        t0 = clock()
        state.update(ev)
        per_type[type(ev).__name__] += clock() - t0
    return per_type


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEV_TRACE)
    ap.add_argument("--source", choices=("toy", "sim"), default="toy")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.source == "toy":
        events = toy_events(load_trace(args.trace).requests, nodes=args.nodes)
    else:
        events = sim_events(args.trace, args.nodes)
    cfg = FeatureConfig(nodes=args.nodes)

    t_table, table = best(lambda: event_table(events, cfg), args.repeat)
    t_build, df = best(lambda: build_feature_dataset(table, None, cfg), args.repeat)
    t_base_off, _ = best(
        lambda: np.argsort(np.unique(table.a_hash, return_inverse=True)[1], kind="stable"),
        args.repeat,
    )
    block_events = table.block_events

    t_walk, _ = best(lambda: walk(events), args.repeat)
    t_update, state = best(lambda: online(events, cfg), args.repeat)
    per_type = online_by_type(events, cfg)
    counts: dict[str, int] = defaultdict(int)
    for ev in events:
        counts[type(ev).__name__] += 1
    now = max(e.ts_ms for e in events if isinstance(e, RequestArrived))
    state = online([e for e in events if e.ts_ms <= now], cfg)
    cands = state.candidates(now)
    t_rows, _ = best(lambda: state.rows(now, cands), args.repeat)

    n = len(events)
    report = {
        "trace": str(args.trace),
        "source": args.source,
        "events": n,
        "block_events": block_events,
        "offline": {
            "rows": len(df),
            "seconds_table": round(t_table, 4),
            "seconds_build": round(t_build, 4),
            "block_events_per_s": round(block_events / (t_table + t_build)),
            "block_events_per_s_from_table": round(block_events / t_build),
            "rows_per_s": round(len(df) / (t_table + t_build)),
            "baseline_sort_accesses_s": round(t_base_off, 4),
            "build_over_baseline": round(t_build / t_base_off, 1),
            "goal_block_events_per_s": 1_000_000,
        },
        "online": {
            "us_per_event": round(t_update / n * 1e6, 3),
            "us_per_event_by_type": {
                k: round(per_type[k] / counts[k] * 1e6, 3) for k in sorted(per_type)
            },
            "baseline_walk_us_per_event": round(t_walk / n * 1e6, 3),
            "update_over_baseline": round(t_update / t_walk, 1),
            "rows_us_per_row": round(t_rows / max(len(cands), 1) * 1e6, 3),
            "candidates_at_last_request": len(cands),
            "memory": state.memory(),
            "goal_us_per_event": 5.0,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
