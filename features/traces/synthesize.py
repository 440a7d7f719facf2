"""A longer trace with the statistics of a real one: sessions replayed with fresh block ids.

The source is cut into *sessions* (:mod:`kvcast.features.traces.sessions`: explicit ids, else
the block after the prompt shared between sessions); a block in at least half of all requests
(such as a system prompt) is *global*. Each of ``scale`` copies places every
session at the start time of a session of the source drawn without replacement (so each copy
has the source's session arrivals, quantisation included), keeps the session's own turns at
their offsets, and gives every non-global block a fresh id of its own (the source's private
ids numbered densely, each copy's run of them above every id of the source, or below them
when int64, or u64 for a source of u64 hashes, has no room above): prefix sharing inside and
between a copy's sessions is the source's, no block is shared between copies, and no id of
the source survives except the global ones. Copy ``k`` starts
``k x duration`` later, so the result is ``scale`` times as long at the source's rate; turns
that would run past the end wrap around to the start (as the source's own first minutes hold
turns of sessions begun before it).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

from kvcast.features.traces.block_ids import fresh_run
from kvcast.features.traces.sessions import replay_span, session_ids, session_starts

GLOBAL_SHARE = 0.5  # a block in at least this share of requests is global (kept as is)


def global_blocks(hashes: list[list[int]]) -> set[int]:
    counts: dict[int, int] = {}
    for hs in hashes:
        for h in set(hs):
            counts[h] = counts.get(h, 0) + 1
    return {h for h, c in counts.items() if c >= GLOBAL_SHARE * max(len(hashes), 1)}


def synthesize(requests: pd.DataFrame, scale: int, seed: int = 0) -> pd.DataFrame:
    """``scale`` copies of the source's sessions as described above; columns
    ``arrival_ms, input_tokens, output_tokens, block_hashes, session``, sorted by arrival."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    if len(requests) == 0:
        raise ValueError("the source trace has no requests")
    hashes = [list(map(int, h)) for h in requests["block_hashes"]]
    shared = global_blocks(hashes)
    sess = session_ids(requests)
    t = requests["arrival_ms"].to_numpy(dtype=float)
    start = session_starts(sess, t)
    duration = replay_span(t)
    # each copy's private blocks: fresh ids counting up from above every id of the source
    # (numbered densely, so any id range works, negative or near int64's (u64's) limit)
    own = sorted({h for hs in hashes for h in hs if h not in shared})
    rank = {h: i for i, h in enumerate(own)}
    base = fresh_run([h for hs in hashes for h in hs], scale * len(own))
    if base is None:
        raise ValueError("trace synth: no room in 64 bits for the copies' block ids")
    t0, total = float(t.min()), scale * duration
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(scale):
        slot = rng.permutation(start)  # session s starts where session perm(s) did
        first = base + k * len(own)
        parts.append(
            pd.DataFrame(
                {
                    "arrival_ms": t0 + (slot[sess] + (t - start[sess]) + k * duration - t0) % total,
                    "input_tokens": requests["input_tokens"].to_numpy(),
                    "output_tokens": requests["output_tokens"].to_numpy(),
                    "block_hashes": [
                        [h if h in shared else first + rank[h] for h in hs] for hs in hashes
                    ],
                    "session": [f"c{k}-s{s}" for s in sess.tolist()],
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values("arrival_ms", kind="stable", ignore_index=True)


def write_mooncake(requests: pd.DataFrame, path: str | Path, sessions: bool = False) -> Path:
    """Mooncake JSONL (gzip when the name ends in ``.gz``); ``sessions`` writes the
    ``session`` key too (it makes the sessions explicit to the feature pipeline)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "wt", encoding="utf-8") as f:
        for row in requests.itertuples(index=False):
            rec = {
                "timestamp": round(row.arrival_ms),
                "input_length": int(row.input_tokens),
                "output_length": int(row.output_tokens),
                "hash_ids": row.block_hashes,
            }
            if sessions:
                rec["session"] = row.session
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return p
