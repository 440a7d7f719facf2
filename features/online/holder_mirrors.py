"""Each run's mirror of ``Residency.holders``: per block of the run, the block's entry, kept
at the block's code so that a tick reads its candidates' holders run by run.

A tick's candidates are read run by run (:mod:`kvcast.features.online.chain_codes`); their
holders read block by block from the holders dict cost a cache miss or two per block on a
live sidecar (the block's int and the dict's slot, both cold after the events between
ticks: ~0.12 ms a tick on ``bench_tick_trace.py``'s state), against ~0.02 ms for list slices
of the runs' mirrors.

The table fills a run's mirror from the dict when it places the run (a new run or a split's
tail; a split's head keeps its part), and the residency writes every entry it changes
through :meth:`HolderMirrors.write`. An event names the blocks of a request, or a part of
them, in order, so a write goes run by run as the tick's read does: the code of the first
block named, then as many of the next as agree with the run's own blocks, one slice
assignment. That holds for a run live at the table's newest request (its blocks are all
still its own); any other run, or a block that departs from its run, is written alone.
Invariant: for every block in ``code_of``, the mirror at its code is its ``holders`` entry
(0 when it has none).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcast.features.online.blocks import HASHES, HELD, LAST, BlockTable
from kvcast.features.online.chain_codes import agreed
from kvcast.features.online.codes import MASK, SHIFT


class HolderMirrors:
    def __init__(self, table: BlockTable) -> None:
        self.table = table

    def write(self, hashes: Sequence[int], entries: Sequence[int]) -> None:
        """Set each of ``hashes``' mirrors (where the table keeps the block) to its entry
        (``entries[i]`` for ``hashes[i]``)."""
        hashes = tuple(hashes)  # (a tuple is itself; compared with the runs' own)
        table = self.table
        get, slot_runs, k = table.code_of.get, table.slot_runs, table.k
        held_at, hashes_at, last_at = k + HELD, k + HASHES, k + LAST
        horizon, latest = table.horizon, table.latest
        i, n = 0, len(hashes)
        while i < n:
            code = get(hashes[i])
            if code is None:
                i += 1
                continue
            run = slot_runs[code >> SHIFT]
            assert run is not None  # a code's run is there
            lo = code & MASK
            hs = run[hashes_at]
            m = len(hs) - lo
            if m > n - i:
                m = n - i
            # one block, or a run not live: the table's own test, rounding included (a run
            # last requested at ``latest - horizon``, rounded up, may be past it for ``cover``)
            if m == 1 or run[last_at] + horizon <= latest:
                run[held_at][lo] = entries[i]
                i += 1
                continue
            if hashes[i : i + m] != hs[lo : lo + m]:  # departs from the run
                m = agreed(hashes, i, hs, lo, m)
            run[held_at][lo : lo + m] = entries[i : i + m]
            i += m
