"""Each run's numbers that the feature rows read, kept packed in one float table by slot.

A run (:mod:`kvcast.features.online.blocks`) is a Python list that every request touching it
updates in place; a tick reads, for each candidate run, the same few numbers out of it (the
scaled sums, first and last access, the request's position, the newest child / session /
tenant times, the request's node, tokens, public blocks, tenant and explicit-session flag,
the run's length and whether it keeps older keys, and of each kind of older keys how many are
live). Packing them is a C-level pass per run (a Python one for the older keys), yet it was
most of the per-run cost of a tick, and between two ticks only the runs the new requests
touched change.

So the block table marks a run's slot whenever it changes the run (a touch, a split, a new
run in the slot), a sweep (which rescales every sum) makes every slot stale at once, and
:meth:`RunNumbers.read` packs again only the stale slots among those asked, from the same
Python values as before: the numbers read are exactly those a fresh pack would give.
:meth:`RunNumbers.refresh` packs every changed slot ahead of the read (the sidecar's consumer
calls it whenever its queue is empty, so that a tick finds little left to pack). The live
older keys are counted at the pack's time ``at`` with the time ``until`` which the count holds
(the next expiry: the count changes only as time passes one, the run unchanged), and a read
at ``now`` uses the count where ``at <= now < until`` (the caller counts the others afresh).
The session key of each run's last request is kept beside its row (the session's own state
changes with other runs' requests, so it is read at the tick).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from kvcast.features.online.keys import live_until
from kvcast.features.online.packing import pack_rows

REC = itemgetter(1, 3, 4, 5, 6)  # of a request record: node, tokens, public, tenant, explicit
KEY = 2  # of a request record: the session key

Run = list[Any]


KINDS = 3  # kinds of older keys: children, sessions, tenants
NO_OLDERS = (0.0, *(0.0, math.inf) * KINDS, -math.inf)  # (olders, live / until per kind, at)


class RunNumbers:
    """``[slots, width]`` floats per run slot (columns in :meth:`columns`), packed lazily."""

    def __init__(
        self,
        fields: tuple[int, ...],
        req: int,
        hashes: int,
        olders: tuple[int, ...],
        newest: tuple[int, ...],
    ) -> None:
        """``fields``: where the float numbers are in a run (the ``k`` scaled sums, first and
        last access, position, newest child, session and tenant times); ``req``: its last
        request's record; ``hashes``: its blocks; ``olders``: its older-keys dicts;
        ``newest``: their kinds' newest keys."""
        self.k = k = len(fields) - 6
        self._fields = itemgetter(*fields)
        self._req, self._hashes = itemgetter(req), itemgetter(hashes)
        self._olders, self._newest = itemgetter(*olders), itemgetter(*newest)
        self.width = k + 20
        self.table = np.zeros((0, self.width))
        self.keys: list[Any] = []  # per slot, the session key of the run's last request
        self._packed = np.zeros(0, np.int64)  # per slot, the generation it was packed in
        self.generation = 1  # a slot packed in an older one is stale
        self.changed: set[int] = set()  # slots changed since the last read

    @staticmethod
    def columns(k: int) -> dict[str, int]:
        """Where each number is: ``sums`` .. ``sums + k - 1`` the scaled sums, then first and
        last access, the position of the run in its last request, the newest child, session
        and tenant times, the request's node, tokens, public blocks, tenant code and explicit
        flag, the run's last index, whether it keeps older keys (1.0) or not (0.0), then per
        kind (children, sessions, tenants) its older keys live at ``at`` (the newest left out)
        and the time ``until`` which that count holds, and ``at``."""
        names = ("first", "last", "pos0", "child_t", "sess_t", "tenant_t", "node", "tokens",
                 "public", "tenant", "explicit", "end", "olders", "live0", "until0", "live1",
                 "until1", "live2", "until2", "at")  # fmt: skip
        return {"sums": 0, **{name: k + i for i, name in enumerate(names)}}

    def stale_all(self) -> None:
        """Every run changed (a sweep rescaled the sums)."""
        self.generation += 1

    def read(self, slot_runs: Sequence[Run | None], slots: np.ndarray, now: float) -> np.ndarray:
        """``[len(slots), width]``: the numbers of the runs in ``slots`` (distinct, live),
        packing first those that changed since they were last packed (their older keys
        counted at ``now``)."""
        self.grow(len(slot_runs))  # (the block table grows it as it adds slots)
        self._mark()
        stale = slots[self._packed[slots] != self.generation]
        if len(stale):
            self._pack(slot_runs, stale, now)
        return self.table.take(slots, axis=0)

    def refresh(self, slot_runs: Sequence[Run | None], at: float) -> int:
        """Pack every run changed since the last read or refresh (their older keys counted at
        ``at``), ahead of the read; how many."""
        if not self.changed:
            return 0
        self.grow(len(slot_runs))
        changed = [s for s in self.changed if slot_runs[s] is not None]  # not a dropped run's
        self._mark()
        if changed:
            self._pack(slot_runs, np.array(changed, np.int64), at)
        return len(changed)

    def _mark(self) -> None:
        if self.changed:
            self._packed[list(self.changed)] = 0
            self.changed.clear()

    def _pack(self, slot_runs: Sequence[Run | None], stale: np.ndarray, at: float) -> None:
        slots = stale.tolist()
        runs = list(map(slot_runs.__getitem__, slots))
        self.table[stale] = pack_rows(map(self._numbers, runs, repeat(at)), len(slots), self.width)
        reqs = map(self._req, runs)
        for slot, key in zip(slots, map(itemgetter(KEY), reqs), strict=True):
            self.keys[slot] = key
        self._packed[stale] = self.generation

    def _numbers(self, run: Run, at: float) -> tuple[float, ...]:
        olders = self._olders(run)
        numbers = (*self._fields(run), *REC(self._req(run)), len(self._hashes(run)) - 1)
        if not any(olders):
            return (*numbers, *NO_OLDERS)
        counts: list[float] = []
        for older, newest in zip(olders, self._newest(run), strict=True):
            counts += live_until(older, newest, at) if older else (0, math.inf)
        return (*numbers, 1.0, *counts, at)

    def grow(self, n: int) -> None:
        """Room for ``n`` slots (doubling: a copy of the table, so the block table calls it
        as it adds a slot, on the ingestion path, rather than a tick's read finding it
        short)."""
        have = len(self._packed)
        if n <= have:
            return
        size = max(n, 2 * have, 64)
        table = np.zeros((size, self.width))
        table[:have] = self.table
        packed = np.zeros(size, np.int64)
        packed[:have] = self._packed
        self.table, self._packed = table, packed
        self.keys.extend([None] * (size - have))
