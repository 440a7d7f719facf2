"""Undo timestamp quantisation: spread requests that share a timestamp across its quantum.

Mooncake's conversation trace records arrivals on a ~3 s grid (90% of requests share a
timestamp with another), so replayed as-is every 3 s a batch of ~10 requests lands in the same
millisecond, and no load level, however low, is free of queueing. ``spread_quantized`` gives
the requests of each timestamp sorted, seeded uniform offsets within ``[t, t + quantum)``,
keeping their file order (so turns of one conversation stay in order). A trace whose
timestamps are mostly distinct (Poisson arrivals) is left as it is.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvcast.features.traces.table import Trace, sort_by_arrival

DUPLICATE_FRACTION = 0.5
"""A trace counts as quantised when more than this fraction of requests share a timestamp."""


def detect_quantum_ms(arrivals: np.ndarray) -> float | None:
    """The grid step of a quantised trace (median gap of distinct timestamps), else None."""
    if len(arrivals) < 2:
        return None
    distinct = np.unique(arrivals)
    if 1 - len(distinct) / len(arrivals) <= DUPLICATE_FRACTION or len(distinct) < 2:
        return None
    return float(np.median(np.diff(distinct)))


def spread_quantized(trace: Trace, quantum_ms: float | None = None, seed: int = 0) -> Trace:
    """Spread same-timestamp arrivals over ``quantum_ms`` (detected when None)."""
    df = trace.requests
    arr = df["arrival_ms"].to_numpy(dtype=np.float64)
    q = detect_quantum_ms(arr) if quantum_ms is None else quantum_ms
    if q is None or q <= 0 or len(arr) == 0:
        return trace
    rng = np.random.default_rng(seed)
    out = arr.copy()
    starts = np.flatnonzero(np.r_[True, arr[1:] != arr[:-1]])
    ends = np.r_[starts[1:], len(arr)]
    for s, e in zip(starts, ends, strict=True):
        if e - s > 1:
            out[s:e] = arr[s] + np.sort(rng.uniform(0.0, q, e - s))
    new = df.copy()
    new["arrival_ms"] = out
    new, _ = sort_by_arrival(new)  # a group spread past a closer next timestamp: re-sort
    return replace(trace, requests=new)
