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
A run holds a slot (``slot_runs[slot] is run``; dropped runs' slots are reused) and a block
is one int, ``code_of[h]`` (:mod:`kvcast.features.online.codes`): its run's slot and index.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kvcast.features.online.codes import MASK, SHIFT, RunOf, named
from kvcast.features.online.keys import EMPTY, KEY, KEY2, OLDER, T2, T, switch
from kvcast.features.online.run_numbers import RunNumbers

FIRST, LAST, REQ, POS0, HASHES, CHILD, SESS, TENANT = 0, 1, 2, 3, 4, 5, 10, 15  # after sums
SLOT = 20  # after sums: the run's index in ``BlockTable.slot_runs``
Run = list[Any]
NO_REQUEST = (float("nan"), -1, None, 0, 0, 0.0, 0.0, 0)
# a request's record (``run[k + REQ]``): time, node, session key, input tokens, public
# blocks, tenant code, explicit session (0/1), how many blocks (after repeats are removed)


class BlockTable:
    def __init__(
        self,
        half_lives_ms: tuple[float, ...],
        window_ms: float,
        horizon_ms: float,
        max_blocks: int | None = None,
    ):
        if max_blocks is not None and max_blocks < 1:
            raise ValueError(f"max_blocks must be >= 1 or None, got {max_blocks}")
        self.half_lives = half_lives_ms
        self.max_blocks = max_blocks
        self.shed_blocks = 0  # blocks dropped by the cap (not by the horizon)
        self.k = k = len(half_lives_ms)
        self.window, self.horizon = window_ms, horizon_ms
        self.code_of: dict[int, int] = {}  # block hash -> slot << SHIFT | index in its run
        self.runs: dict[int, Run] = {}  # id -> run
        self.t0 = 0.0
        self.latest = float("-inf")  # the newest request's time (runs live then name all theirs)
        self.next_sweep = self.sweep_every = min(horizon_ms, 500.0 * min(half_lives_ms))
        self._last, self._hashes, self._pos0 = k + LAST, k + HASHES, k + POS0
        self._fresh: Run = [0.0] * k + [0.0, 0.0, None, 0, (), *EMPTY, *EMPTY, *EMPTY, 0]
        self.dead: Run = self._fresh.copy()  # stands in for a block without state
        self.dead[k + FIRST : k + REQ + 1] = [float("-inf"), float("-inf"), NO_REQUEST]
        self.slot_runs: list[Run | None] = [self.dead]  # code 0: a block without state
        self.run_of = RunOf(self.code_of, self.slot_runs)  # block hash -> its run
        self._free: list[int] = []  # slots of dropped runs
        c, sess, ten = k + CHILD, k + SESS, k + TENANT
        self.numbers = RunNumbers(  # what the rows read of each run, packed as runs change
            (*range(k), k + FIRST, k + LAST, k + POS0, c + T, sess + T, ten + T),
            k + REQ, k + HASHES, (c + OLDER, sess + OLDER, ten + OLDER),
            (c + KEY, sess + KEY, ten + KEY),
        )  # fmt: skip
        self._changed = self.numbers.changed  # slots whose run changed since the last read

    def _place(self, run: Run, hashes: tuple[int, ...]) -> None:
        """Give ``run`` a slot and its blocks their codes."""
        if self._free:
            slot = self._free.pop()
            self.slot_runs[slot] = run
        else:
            slot = len(self.slot_runs)
            self.slot_runs.append(run)
            self.numbers.grow(slot + 1)  # here, not in a tick's read: a copy of the table
        run[self.k + SLOT] = slot
        self._changed.add(slot)
        code = slot << SHIFT
        self.code_of.update(zip(hashes, range(code, code + len(hashes)), strict=False))

    def live(self, run: Run | None, now: float) -> bool:
        return run is not None and run[self._last] + self.horizon > now

    def _run_of(self, h: int) -> Run | None:
        code = self.code_of.get(h)
        return None if code is None else self.slot_runs[code >> SHIFT]

    def _new_run(self, ts: float, hashes: tuple[int, ...]) -> Run:
        run = self._fresh.copy()
        k = self.k
        run[k + FIRST] = run[k + LAST] = ts
        run[k + HASHES] = hashes
        self.runs[id(run)] = run
        self._place(run, hashes)
        return run

    def _split(self, run: Run, at: int) -> Run:
        """Cut ``run`` before offset ``at``; returns the new tail run."""
        k, c = self.k, self.k + CHILD
        hs = run[self._hashes]
        tail = run.copy()
        tail[self._hashes], tail[self._pos0] = hs[at:], run[self._pos0] + at
        for older in (k + SESS + OLDER, k + TENANT + OLDER):
            if tail[older] is not None:  # an empty one too: never one dict for two runs
                tail[older] = tail[older].copy()
        run[self._hashes] = hs[:at]
        run[c : c + len(EMPTY)] = [hs[at], run[self._last], *EMPTY[KEY2:]]
        self._changed.add(run[k + SLOT])
        self.runs[id(tail)] = tail
        self._place(tail, hs[at:])
        return tail

    def cover(self, ts: float, hashes: tuple[int, ...]) -> list[tuple[Run, int, int]]:
        """Split runs so whole runs cover ``hashes``: ``(run, start, end)`` in request order."""
        code_of, slot_runs, n, out, i = self.code_of, self.slot_runs, len(hashes), [], 0
        hi, horizon, last = self._hashes, self.horizon, self._last
        if ts > self.latest:
            self.latest = ts
        while i < n:
            h = hashes[i]
            code = code_of.get(h)
            run = None if code is None else slot_runs[code >> SHIFT]
            if run is None or run[last] + horizon <= ts:
                j = i + 1
                if any(map(code_of.__contains__, hashes[j:])):
                    while j < n and not self.live(self._run_of(hashes[j]), ts):
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
            off = code & MASK  # type: ignore[operator]
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
        last, req, pos0, slot = k + LAST, k + REQ, k + POS0, k + SLOT
        three = k == 3  # the default: unrolled, three times faster than the loop
        w0, w1, w2 = w if three else (0.0, 0.0, 0.0)
        changed = self._changed
        for run, start, end in cover:
            changed.add(run[slot])
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

    def over_cap(self) -> bool:
        return self.max_blocks is not None and len(self.code_of) > self.max_blocks

    def sweep(self, now: float) -> None:
        """Drop runs unseen for ``horizon``; rebase the scaled sums to ``T0 = now``.

        Over ``max_blocks``, also drop the least recently requested runs until at most 90% of
        the cap is left: an operational bound on memory whatever the block rate. A dropped
        block is treated as never seen (as past the horizon); the count is in ``shed_blocks``.
        """
        factors = [2.0 ** ((self.t0 - now) / h) for h in self.half_lives]
        self.numbers.stale_all()  # every sum is rescaled
        for key, run in list(self.runs.items()):
            if self.live(run, now):
                for i, f in enumerate(factors):
                    run[i] *= f
                continue
            self._drop(key, run)
        if self.over_cap():
            assert self.max_blocks is not None
            target = int(self.max_blocks * 0.9)
            for key, run in sorted(self.runs.items(), key=lambda kv: kv[1][self._last]):
                if len(self.code_of) <= target:
                    break
                before = len(self.code_of)
                self._drop(key, run)
                self.shed_blocks += before - len(self.code_of)
        self.t0 = now
        self.next_sweep = now + self.sweep_every

    def _drop(self, key: int, run: Run) -> None:
        del self.runs[key]
        self.slot_runs[slot := run[self.k + SLOT]] = None
        self._free.append(slot)
        deque(map(self.code_of.pop, named(self.code_of, run[self._hashes], slot)), maxlen=0)

    def __len__(self) -> int:
        return len(self.code_of)
