"""Node load and memory at every (tick, node), from the telemetry samples; rows then gather
their home node's values. Same definitions as :mod:`kvcast.features.online.telemetry`:
window ``W`` holds the samples with ``ts + W > t`` and ``ts <= t``; slopes are two-pass least
squares; evictions are reset-adjusted like a Prometheus counter.
"""

from __future__ import annotations

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters


def _slope(t: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    counts = hi - lo
    n = np.maximum(counts, 1)
    owner = np.repeat(np.arange(len(lo)), counts)
    idx = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    mt = np.bincount(owner, weights=t[idx], minlength=len(lo)) / n
    my = np.bincount(owner, weights=y[idx], minlength=len(lo)) / n
    dt = t[idx] - mt[owner]
    var = np.bincount(owner, weights=dt * dt, minlength=len(lo))
    cov = np.bincount(owner, weights=dt * (y[idx] - my[owner]), minlength=len(lo))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((counts >= 2) & (var > 0), cov / var * 1000.0, np.nan)


def node_table(
    tel: dict[str, np.ndarray], ticks: np.ndarray, cfg: FeatureConfig, bad: BadInputCounters
) -> np.ndarray:
    """``[nodes, ticks, 5 + 2W + 5]``: queue family then memory family, NaN without samples."""
    width = 10 + 2 * len(cfg.queue_windows_ms)
    out = np.full((cfg.nodes, len(ticks), width), np.nan)
    for node in range(cfg.nodes):
        sel = np.flatnonzero(tel["node"] == node)
        if len(sel) == 0:
            continue
        s = {k: v[sel] for k, v in tel.items()}
        ts = s["ts"]
        ev = s["evictions_total"]
        step = np.diff(ev)
        bad.inc("telemetry_counter_reset", int((step < 0).sum()))
        adjusted = np.r_[0.0, np.cumsum(np.where(step >= 0, step, ev[1:]))]
        hi = np.searchsorted(ts, ticks, "right")
        has = hi > 0
        last = np.maximum(hi - 1, 0)
        cap = s["capacity_bytes"][last]
        cols = [s[f][last] for f in ("queue_len", "queued_prefill_tokens", "est_queue_ms")]
        cols.append(s["transfers_in_flight"][last])
        for field in ("queue_len", "queued_prefill_tokens"):
            for w in cfg.queue_windows_ms:
                lo = np.searchsorted(ts + w, ticks, "right")
                cols.append(_slope(ts, s[field], lo, np.maximum(hi, lo)))
        cols.append(ticks - ts[last])
        cols += [s[f][last] / cap for f in ("used_bytes", "cached_bytes", "speculative_bytes")]
        cols.append((cap - s["used_bytes"][last] - s["pending_replication_bytes"][last]) / cap)
        lo = np.searchsorted(ts + cfg.eviction_window_ms, ticks, "right")
        first = np.minimum(lo, last)
        span = ts[last] - ts[first]
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = (adjusted[last] - adjusted[first]) / span * 1000.0
        cols.append(np.where((hi - lo >= 2) & (span > 0), rate, np.nan))
        out[node] = np.where(has[:, None], np.column_stack(cols), np.nan)
    return out
