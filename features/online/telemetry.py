"""Per-node load and memory from ``TelemetrySample``: latest values, slopes, eviction rate.

Samples are kept while ``ts + max_window > newest``. The eviction counter is read like a
Prometheus counter: a decrease is a reset (counted as ``telemetry_counter_reset``) and the new
value is the increase since it.

A row is cached: the slopes and the eviction rate depend only on which samples each window
holds (a suffix of the time-ordered samples, found by bisection), so until a sample arrives or
enters or leaves a window a row costs two comparisons and the telemetry age.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Any

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
        self.width = 10 + 2 * len(windows_ms)  # the length of a row
        self._version = 0  # samples added so far
        self._cols: tuple[int, np.ndarray] | None = None  # (version, samples as 4 rows)
        self._key = -1  # the version ``_vals`` was computed at, valid for lo <= now < hi
        self._lo, self._hi = 0.0, 0.0
        self._vals: list[float] = []  # the row less the telemetry age

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
        self._version += 1
        q.append((ts, float(s.queue_len), float(s.queued_prefill_tokens), self.evictions))
        while q[0][0] + self.keep <= ts:
            q.popleft()

    def row(self, now: float) -> list[float]:
        """Queue family then memory family values (spec order), NaN without samples."""
        s = self.last
        if s is None:
            return [NAN] * self.width
        if self._key != self._version or not self._lo <= now < self._hi:
            self._refresh(now)
        vals = self._vals
        at = 4 + 2 * len(self.windows)
        return [*vals[:at], now - s.ts_ms, *vals[at:]]

    def _refresh(self, now: float) -> None:
        """Recompute the cached row; it holds while no window gains or loses a sample."""
        if self._cols is None or self._cols[0] != self._version:
            self._cols = (self._version, np.array(self.samples).T.copy())
        t = self._cols[1][0]
        windows = (*self.windows, self.ev_window)
        if (t[1:] < t[:-1]).any():  # out of time order (fed directly): select by time, no cache
            self._vals, self._key = self._row([t + w > now for w in windows]), -1
            return
        q = self.samples
        cuts, lo, hi = [], float("-inf"), float("inf")
        for w in windows:
            i = bisect_right(q, now, key=lambda x, w=w: x[0] + w)  # first x[0] + w > now
            cuts.append(slice(i, None))
            if i:
                lo = max(lo, q[i - 1][0] + w)
            if i < len(q):
                hi = min(hi, q[i][0] + w)
        self._vals, self._key, self._lo, self._hi = self._row(cuts), self._version, lo, hi

    def _row(self, cuts: list[Any]) -> list[float]:
        """The row less the telemetry age; ``cuts`` select each window's samples, then the
        eviction window's."""
        s = self.last
        assert s is not None and self._cols is not None
        arr = self._cols[1]
        t = arr[0]
        slopes_q, slopes_p = [], []
        for m in cuts[:-1]:
            slopes_q.append(lsq_slope_per_s(t[m], arr[1, m]))
            slopes_p.append(lsq_slope_per_s(t[m], arr[2, m]))
        tm = t[cuts[-1]]
        rate = NAN
        if len(tm) >= 2 and tm[-1] > tm[0]:
            ev = arr[3, cuts[-1]]
            rate = (ev[-1] - ev[0]) / (tm[-1] - tm[0]) * 1000.0
        cap = float(s.capacity_bytes)
        free = (cap - s.used_bytes - s.pending_replication_bytes) / cap
        return [
            float(s.queue_len),
            float(s.queued_prefill_tokens),
            float(s.est_queue_ms),
            float(s.transfers_in_flight),
            *slopes_q,
            *slopes_p,
            s.used_bytes / cap,
            s.cached_bytes / cap,
            s.speculative_bytes / cap,
            free,
            rate,
        ]
