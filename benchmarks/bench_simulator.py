"""Simulator speed: replay the dev conversation trace on 8 nodes with ``dynamo_kv``.

Prints JSON: simulated requests per wall second (goal >= 10,000 on one core), block
references per second, and beside them a same-run baseline (a bare Python pass that only
walks every request's block list and does one dict lookup per block, the least any replay
must do) so that figures from a noisy shared machine can be compared. Memory: the traced
peak of a replay of the first half of the trace and of the whole trace (it should grow with
live blocks, not with the trace).

    python benchmarks/bench_simulator.py [--trace PATH] [--policy dynamo_kv] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path

from kvcast.features.traces import Trace, load_trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import simulate

DEV_TRACE = Path(__file__).resolve().parents[2] / "shared/traces/mooncake_conversation_dev.jsonl"


def baseline_pass(trace: Trace) -> float:
    blocks = [list(map(int, b)) for b in trace.requests["block_hashes"]]
    seen: dict[int, int] = {}
    t0 = time.perf_counter()
    for bl in blocks:
        for b in bl:
            seen[b] = seen.get(b, 0) + 1
    return time.perf_counter() - t0


def peak_mib(trace: Trace, policy: str) -> float:
    tracemalloc.start()
    simulate(trace, SimConfig(), policy)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEV_TRACE)
    ap.add_argument("--policy", default="dynamo_kv")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = load_trace(args.trace)
    refs = int(trace.requests["block_hashes"].map(len).sum())
    walls = []
    for _ in range(args.repeat):
        res = simulate(trace, SimConfig(), args.policy)
        walls.append(res.summary["sim_wall_s"])
    base = min(baseline_pass(trace) for _ in range(args.repeat))
    best = min(walls)
    half = trace.window(None, trace.requests["arrival_ms"].iloc[len(trace) // 2])
    print(
        json.dumps(
            {
                "trace": str(args.trace.name),
                "policy": args.policy,
                "nodes": 8,
                "requests": len(trace),
                "block_refs": refs,
                "sim_wall_s": round(best, 3),
                "requests_per_s": round(len(trace) / best),
                "block_refs_per_s": round(refs / best),
                "baseline_bare_walk_block_refs_per_s": round(refs / base),
                "sim_cost_vs_bare_walk": round(best / base, 1),
                "peak_mib_half_trace": round(peak_mib(half, args.policy), 1),
                "peak_mib_full_trace": round(peak_mib(trace, args.policy), 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
