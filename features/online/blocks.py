"""Per-block prefix state kept per *run*: blocks that so far were always requested together.

The per-block quantities (decayed counts, first/last access, depth, children, sessions,
tenants) are identical for blocks that every request so far touched together, contiguously and
in the same order, so they are stored once per such run (a compressed prefix tree). A request
that touches part of a run splits it; the pieces copy the state. A request therefore costs
O(runs) Python steps plus C-level slicing, not O(blocks).

Decayed counts are scaled sums ``S_k = sum_i 2^((t_i - T0)/h_k)``; a read is
``S_k * 2^(-(now - T0)/h_k)``. :meth:`BlockTable.sweep` moves ``T0`` forward before exponents
grow large and drops runs unseen for ``horizon``. A run last requested ``horizon`` or more
before a new request is treated as new (the offline rule: a gap >= horizon starts afresh).
Distinct children/sessions/tenants are kept as in :mod:`kvcast.features.online.keys`.
``off_of`` gives a block's offset in the request that created its run's lineage; runs only
split, so a block's index in its run is ``off_of[h] - run[BASE]`` (read without a scan).
"""

from __future__ import annotations

from itertools import count, repeat
from typing import Any

from kvcast.features.online.keys import EMPTY, KEY, KEY2, OLDER, T2, T, switch

FIRST, LAST, REQ, POS0, HASHES, CHILD, SESS, TENANT = 0, 1, 2, 3, 4, 5, 10, 15  # after sums
BASE = 20  # offset of the run's first block within the request that created its lineage
Run = list[Any]
NO_REQUEST = (float("nan"), -1, None, 0, 0, 0.0, 0.0)


class BlockTable:
    def __init__(self, half_lives_ms: tuple[float, ...], window_ms: float, horizon_ms: float):
        self.half_lives = half_lives_ms
        self.k = k = len(half_lives_ms)
        self.window = window_ms
        self.horizon = horizon_ms
        self.run_of: dict[int, Run] = {}  # block hash -> its run
        self.off_of: dict[int, int] = {}  # block hash -> its index in run[HASHES] plus run[BASE]
        self.runs: dict[int, Run] = {}  # id -> run
        self.t0 = 0.0
        self.sweep_every = min(horizon_ms, 500.0 * min(half_lives_ms))
        self.next_sweep = self.sweep_every
        self._last, self._hashes, self._pos0 = k + LAST, k + HASHES, k + POS0
        self._fresh: Run = [0.0] * k + [0.0, 0.0, None, 0, (), *EMPTY, *EMPTY, *EMPTY, 0]
        self.dead: Run = self._fresh.copy()  # stands in for a block without state
        self.dead[k + FIRST] = self.dead[k + LAST] = float("-inf")
        self.dead[k + REQ] = NO_REQUEST

    def live(self, run: Run | None, now: float) -> bool:
        return run is not None and run[self._last] + self.horizon > now

    def _new_run(self, ts: float, hashes: tuple[int, ...]) -> Run:
        run = self._fresh.copy()
        k = self.k
        run[k + FIRST] = run[k + LAST] = ts
        run[k + HASHES] = hashes
        self.runs[id(run)] = run
        self.run_of.update(zip(hashes, repeat(run)))
        self.off_of.update(zip(hashes, count()))
        return run

    def _split(self, run: Run, at: int) -> Run:
        """Cut ``run`` before offset ``at``; returns the new tail run."""
        k, c = self.k, self.k + CHILD
        hs = run[self._hashes]
        tail = run.copy()
        tail[self._hashes], tail[self._pos0] = hs[at:], run[self._pos0] + at
        tail[k + BASE] = run[k + BASE] + at
        for older in (k + SESS + OLDER, k + TENANT + OLDER):
            if tail[older]:
                tail[older] = tail[older].copy()
        run[self._hashes] = hs[:at]
        run[c : c + len(EMPTY)] = [hs[at], run[self._last], *EMPTY[KEY2:]]
        self.runs[id(tail)] = tail
        self.run_of.update(zip(hs[at:], repeat(tail)))
        return tail

    def cover(self, ts: float, hashes: tuple[int, ...]) -> list[tuple[Run, int, int]]:
        """Split runs so whole runs cover ``hashes``: ``(run, start, end)`` in request order."""
        run_of, n, out, i = self.run_of, len(hashes), [], 0
        hi, horizon, last = self._hashes, self.horizon, self._last
        while i < n:
            h = hashes[i]
            run = run_of.get(h)
            if run is None or run[last] + horizon <= ts:
                j = i + 1
                if any(map(run_of.__contains__, hashes[j:])):
                    while j < n and not self.live(run_of.get(hashes[j]), ts):
                        j += 1
                else:
                    j = n
                out.append((self._new_run(ts, hashes[i:j]), i, j))
                i = j
                continue
            hs = run[hi]
            size = len(hs)
            if hs[0] == h and hashes[i : i + size] == hs:  # the usual case: the whole run
                out.append((run, i, i + size))
                i += size
                continue
            off = hs.index(h)
            m = 1
            while i + m < n and off + m < size and hashes[i + m] == hs[off + m]:
                m += 1
            if off + m < size:
                self._split(run, off + m)
            if off > 0:
                run = self._split(run, off)
            out.append((run, i, i + m))
            i += m
        return out

    def first_branch(
        self, ts: float, cover: list[tuple[Run, int, int]], hashes: tuple[int, ...]
    ) -> int | None:
        """First position whose block has seen >1 distinct child, counting this request's."""
        c, window, n = self.k + CHILD, self.window, len(hashes)
        for run, _, end in cover:
            if end < n and run[c + KEY] is not None:
                other_t = run[c + T2] if run[c + KEY] == hashes[end] else run[c + T]
                if other_t + window > ts:
                    return end - 1
        return None

    def touch(
        self,
        ts: float,
        cover: list[tuple[Run, int, int]],
        hashes: tuple[int, ...],
        rec: tuple,
        sess: Any,
        ten: Any,
    ) -> None:
        """Record the request on every run of ``cover``."""
        k, window, n = self.k, self.window, len(hashes)
        w = [2.0 ** ((ts - self.t0) / h) for h in self.half_lives]
        c, s, t = k + CHILD, k + SESS, k + TENANT
        last, req, pos0 = k + LAST, k + REQ, k + POS0
        three = k == 3  # the default: unrolled, three times faster than the loop
        w0, w1, w2 = w if three else (0.0, 0.0, 0.0)
        for run, start, end in cover:
            if three:
                run[0] += w0
                run[1] += w1
                run[2] += w2
            else:
                for i, wi in enumerate(w):
                    run[i] += wi
            run[last] = ts
            run[req] = rec
            run[pos0] = start
            if end < n:
                if run[c] == hashes[end]:
                    run[c + T] = ts
                else:
                    switch(run, c, hashes[end], ts, window)
            if sess is not None:
                if run[s] == sess:
                    run[s + T] = ts
                else:
                    switch(run, s, sess, ts, window)
            if run[t] == ten:
                run[t + T] = ts
            else:
                switch(run, t, ten, ts, window)

    def sweep(self, now: float) -> None:
        """Drop runs unseen for ``horizon``; rebase the scaled sums to ``T0 = now``."""
        factors = [2.0 ** ((self.t0 - now) / h) for h in self.half_lives]
        for key, run in list(self.runs.items()):
            if self.live(run, now):
                for i, f in enumerate(factors):
                    run[i] *= f
                continue
            del self.runs[key]
            for h in run[self._hashes]:
                if self.run_of.get(h) is run:
                    del self.run_of[h]
                    del self.off_of[h]
        self.t0 = now
        self.next_sweep = now + self.sweep_every

    def __len__(self) -> int:
        return len(self.run_of)
