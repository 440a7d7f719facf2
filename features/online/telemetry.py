"""Per-node load and memory from ``TelemetrySample``: latest values, slopes, eviction rate.

Samples are kept while ``ts + max_window > newest``. The eviction counter is read like a
Prometheus counter: a decrease is a reset (counted as ``telemetry_counter_reset``) and the new
value is the increase since it.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.events import TelemetrySample

NAN = float("nan")


def lsq_slope_per_s(t: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``y`` over ``t`` (ms), per second; NaN if undefined."""
    if len(t) < 2:
        return float("nan")
    dt = t - t.mean()
    var = float(np.dot(dt, dt))
    return float(np.dot(dt, y - y.mean()) / var * 1000.0) if var > 0 else float("nan")


class NodeTelemetry:
    def __init__(self, windows_ms: tuple[float, ...], eviction_window_ms: float) -> None:
        self.windows = windows_ms
        self.ev_window = eviction_window_ms
        self.keep = max(*windows_ms, eviction_window_ms)
        self.last: TelemetrySample | None = None
        self.evictions = 0.0  # reset-adjusted cumulative evictions
        self.samples: deque[tuple[float, float, float, float]] = deque()  # ts, q, tokens, evict

    def add(self, s: TelemetrySample, bad: BadInputCounters) -> None:
        if self.last is not None:
            prev = self.last.evictions_total
            if s.evictions_total < prev:
                bad.counts["telemetry_counter_reset"] += 1
                self.evictions += s.evictions_total
            else:
                self.evictions += s.evictions_total - prev
        self.last = s
        ts = s.ts_ms
        q = self.samples
        q.append((ts, float(s.queue_len), float(s.queued_prefill_tokens), self.evictions))
        while q[0][0] + self.keep <= ts:
            q.popleft()

    def row(self, now: float) -> list[float]:
        """Queue family then memory family values (spec order), NaN without samples."""
        s = self.last
        n = 5 + 2 * len(self.windows) + 5
        if s is None:
            return [NAN] * n
        arr = np.array(self.samples)
        t = arr[:, 0]
        slopes_q, slopes_p = [], []
        for w in self.windows:
            m = t + w > now
            slopes_q.append(lsq_slope_per_s(t[m], arr[m, 1]))
            slopes_p.append(lsq_slope_per_s(t[m], arr[m, 2]))
        m = t + self.ev_window > now
        rate = NAN
        if m.sum() >= 2 and t[m][-1] > t[m][0]:
            ev = arr[m, 3]
            rate = (ev[-1] - ev[0]) / (t[m][-1] - t[m][0]) * 1000.0
        cap = float(s.capacity_bytes)
        free = (cap - s.used_bytes - s.pending_replication_bytes) / cap
        return [
            float(s.queue_len),
            float(s.queued_prefill_tokens),
            float(s.est_queue_ms),
            float(s.transfers_in_flight),
            *slopes_q,
            *slopes_p,
            now - s.ts_ms,
            s.used_bytes / cap,
            s.cached_bytes / cap,
            s.speculative_bytes / cap,
            free,
            rate,
        ]
