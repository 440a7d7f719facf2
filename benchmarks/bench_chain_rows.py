"""A tick's feature rows read run by run against the plain reading; prints one JSON object.

The decision tick reads the rows of its candidate chains' distinct blocks. The plain reading
dedupes the chains' hashes (:func:`~kvcast.features.online.chain_codes.distinct_blocks`) and
looks every distinct block up in ``code_of`` (:meth:`FeatureState.rows`); the sidecar's
(:meth:`FeatureState.chain_rows`) reads the chains a run at a time
(:mod:`kvcast.features.online.chain_codes`). Both on the same states, interleaved tick by tick
(which of the two goes first alternates, so that neither always finds the caches warm; each
tick's requests are applied and the consumer's idle step run before both), per-thread CPU time:
the trace-shaped state of ``bench_tick_trace.py`` (a real trace at ``--factor`` x its peak,
~1,024 candidate blocks, most of a chain's blocks in one run) and ``bench_sidecar.py``'s
synthetic one (128 chains of 8 blocks, each chain one run: the case where reading by run saves
the least). Each tick also checks that both readings agree.

    python benchmarks/bench_chain_rows.py [--ticks 300] [--warm-s 60] [--factor 10]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_sidecar import NODES, cluster, ms
from bench_tick_trace import trace_state
from trace_load import DEV_TRACE

from kvcast.features.config import FeatureConfig
from kvcast.features.online.chain_codes import distinct_blocks
from kvcast.serving.sidecar.consumer import StateKeeper

TICK_MS = 250.0


def compare(keeper: StateKeeper, now: float, feed: Callable[[float], None], n: int) -> dict:
    """Both readings of ``n`` ticks' candidates, interleaved; raises if they differ."""
    state = keeper.state
    cpu: dict[str, list[float]] = {"by_run": [], "plain": []}
    runs, blocks_seen = [], []
    for k in range(n + 1):  # the first not timed (as bench_tick_trace.py's)
        t = now + TICK_MS * (k + 1)
        feed(t)
        chains = keeper.chains.candidates(t, 0).chains
        got: dict[str, Any] = {}
        for name in ("by_run", "plain") if k % 2 else ("plain", "by_run"):
            c = time.thread_time()
            if name == "by_run":
                got[name] = state.chain_rows(t, chains)
            else:
                blocks, where = distinct_blocks(chains)
                got[name] = (blocks, where, state.rows(t, blocks))
            if k:
                cpu[name].append(time.thread_time() - c)
        (b1, w1, r1), (b2, w2, r2) = got["by_run"], got["plain"]
        if b1 != b2 or w1.tolist() != w2.tolist() or r1.tobytes() != r2.tobytes():
            raise SystemExit(f"tick {k}: the two readings differ")
        runs.append(len({code >> 32 for code in map(state.blocks.code_of.get, b1) if code}))
        blocks_seen.append(len(b1))
    return {
        "blocks_p50": float(np.median(blocks_seen)),
        "runs_p50": float(np.median(runs)),
        "by_run_cpu_ms": ms(cpu["by_run"]),
        "plain_cpu_ms": ms(cpu["plain"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--warm-s", type=float, default=60.0)
    ap.add_argument("--factor", type=float, default=10.0)
    ap.add_argument("--trace", default=None, help="default: the dev trace, else the bundled one")
    args = ap.parse_args()
    if args.ticks < 1 or args.warm_s <= 0 or args.factor <= 0:
        raise SystemExit("--ticks must be >= 1, --warm-s and --factor > 0")
    from kvcast.cli.common import open_trace

    spec = args.trace or (str(DEV_TRACE) if DEV_TRACE.is_file() else "bundled:conversation")
    cfg = FeatureConfig(nodes=NODES)
    keeper, now, feed, _ = trace_state(cfg, open_trace(spec), args.factor, args.warm_s, 1024)
    shaped = compare(keeper, now, feed, args.ticks)
    base_keeper, _, base_now, arrive = cluster(cfg)
    synthetic = compare(base_keeper, base_now, arrive, args.ticks)
    out = {"trace": spec, "factor": args.factor, "trace_state": shaped,
           "synthetic_state": synthetic}  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
