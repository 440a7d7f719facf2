"""A tick's reads of its candidates with the CPU caches warm and cold; prints one JSON object.

In a live sidecar the events applied between two ticks evict most of what the last tick read:
the candidates' hash ints, the block table's dicts, the runs. ``bench_tick_trace.py`` times
the whole tick in that state; this one times its reads of the candidates one at a time, each
``--repeat`` times right after a pass over a ``--evict-mb`` buffer (cold) and right after
itself (warm: the same-run baseline), on the trace-shaped state of ``bench_tick_trace.py``:

- ``chain_blocks``: the chains read run by run (codes, dedupe, the distinct blocks);
- ``holders_pass``: one ``Residency.holders`` lookup per distinct block (the residency
  columns' dict pass);
- ``code_of_pass``: one ``code_of`` lookup per distinct block (the plain reading's);
- ``hash_ints``: ``hash()`` of each distinct block's int (reading each int object, nothing
  else);
- ``flatten_chains``: the chains' blocks into one list (a reference count written per int).

Where cold is several times warm, the read is cache misses on Python objects rather than
Python steps: a compiled loop over the same objects would miss the same.

    python benchmarks/bench_cold_reads.py [--repeat 50] [--evict-mb 128] [--warm-s 60]
                                          [--factor 10] [--blocks 1024] [--trace PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

import numpy as np
from bench_sidecar import NODES
from bench_tick_trace import TICK_MS, trace_state
from trace_load import DEV_TRACE

from kvcast.features.config import FeatureConfig
from kvcast.features.online.chain_codes import chain_blocks


def median_us(read: Callable[[], Any], before: Callable[[], None], n: int) -> float:
    """The median wall time of ``read`` (microseconds) over ``n`` calls, each after
    ``before``."""
    out = []
    for _ in range(n):
        before()
        t = time.perf_counter()
        read()
        out.append(time.perf_counter() - t)
    return float(np.median(out)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--evict-mb", type=int, default=128, help="buffer touched before a cold read")
    ap.add_argument("--warm-s", type=float, default=60.0)
    ap.add_argument("--factor", type=float, default=10.0)
    ap.add_argument("--blocks", type=int, default=1024)
    ap.add_argument("--trace", default=None, help="default: the dev trace, else the bundled one")
    args = ap.parse_args()
    if args.repeat < 1 or args.evict_mb < 1 or args.warm_s <= 0 or args.factor <= 0:
        raise SystemExit("--repeat and --evict-mb must be >= 1, --warm-s and --factor > 0")
    from kvcast.cli.common import open_trace

    spec = args.trace or (str(DEV_TRACE) if DEV_TRACE.is_file() else "bundled:conversation")
    cfg = FeatureConfig(nodes=NODES)
    keeper, now, feed, _ = trace_state(cfg, open_trace(spec), args.factor, args.warm_s,
                                       args.blocks)  # fmt: skip
    feed(now + TICK_MS)  # one tick's requests, as before a tick
    table, holders = keeper.state.blocks, keeper.state.residency.holders
    chains = keeper.chains.candidates(now + TICK_MS, 0).chains
    found = chain_blocks(table, chains)
    if found is None:
        raise SystemExit("the candidates took the plain reading: no run-by-run figures")
    blocks = found.blocks
    buffer = np.ones(args.evict_mb << 17)  # 8-byte floats

    def evict() -> None:
        buffer[:] += 1.0

    reads: dict[str, Callable[[], Any]] = {
        "chain_blocks": lambda: chain_blocks(table, chains),
        "holders_pass": lambda: list(map(holders.get, blocks, repeat(0))),
        "code_of_pass": lambda: list(map(table.code_of.get, blocks, repeat(0))),
        "hash_ints": lambda: list(map(hash, blocks)),
        "flatten_chains": lambda: list(chain.from_iterable(chains)),
    }
    out: dict[str, Any] = {
        "trace": spec, "factor": args.factor, "chains": len(chains),
        "distinct_blocks": len(blocks), "runs": len(found.slots),
        "tracked_blocks": len(table), "evict_mb": args.evict_mb,
    }  # fmt: skip
    for name, read in reads.items():
        out[name] = {
            "cold_us": median_us(read, evict, args.repeat),
            "warm_us": median_us(read, read, args.repeat),  # the baseline: right after itself
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
