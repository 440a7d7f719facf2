"""A tick's candidate chains as distinct blocks with their codes, read run by run.

The rows of a tick are those of the candidates' *distinct* blocks (first seen first), and
each block's row starts from its code (:mod:`kvcast.features.online.codes`). Read block by
block, that is a dict pass to dedupe the chains' hashes and a lookup of every distinct hash in
``code_of`` (hundreds of thousands of keys on a live sidecar: a cache miss or two per block).

A chain that a request named is covered by whole runs of the block table (the request split the
runs it touched at its own boundaries, and runs are only ever cut further), so its codes are
read one run at a time: the code of the run's first block found in ``code_of``, the chain's
next blocks compared with the run's own (one C-level tuple comparison), and their codes are the
run's slot with consecutive indices. That holds for every run that no request found past the
horizon: only then may a new run take some of its blocks (and their codes) over, and once past
the horizon a run is never touched again, so a run live at the table's newest request
(:attr:`BlockTable.latest`) still names all its blocks. A chain that departs from a run partway
(its request held for reordering or refused, or with repeated blocks) takes the blocks it
agrees on as one piece (a code names a block of the run, so it agrees on one at least) and
looks its next block up; a run that is not live then is read one block at a time, from
``code_of`` itself (a run past the horizon is rare among recent chains). A departing chain's
comparisons cost about the blocks it agrees on, not the run's length (windows that double).
Blocks are deduped by code (a code names one position of one run, which holds one hash), those
without state (code 0) by hash, in first-seen order: exactly the blocks, the indices and the
codes of the plain reading (:func:`distinct_blocks` then a ``code_of`` lookup per block). Each
chain range's place among the distinct blocks is known as it is read (where the run's first
named range was placed, plus the offset), unless a later chain named more of a run than its
first range (its blocks are then two ranges there: found by sorting the codes).

Reading a chain's blocks costs cache misses more than Python steps (the hash ints and the
``code_of`` entries are cold after the events of a tick's interval). A chain may come with its
request's *cover* (the runs :meth:`BlockTable.cover` cut its blocks into when it was applied,
with their extents in the request). A run of it that is still the one in its slot, as long as
it was then (only a split changes a run's blocks, and it shortens the run) and live at the
table's newest request names exactly the chain's blocks there, each by the code it would be
looked up by: it is read without a block read. The cover's first run that is not (split or
dropped since) and the rest of the chain are read as above. The result is the same either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, compress, count
from operator import ne

import numpy as np

from kvcast.features.online.blocks import HASHES, LAST, SLOT, BlockTable, Run
from kvcast.features.online.codes import MASK, SHIFT


def distinct_blocks(chains: Sequence[Sequence[int]]) -> tuple[list[int], np.ndarray]:
    """The chains' distinct blocks (first seen first) and, per block of the concatenated
    chains, its index among them (C-level passes, no Python step per block)."""
    flat = list(chain.from_iterable(chains))
    total = len(flat)
    if len(set(flat)) == total:  # none shared: the identity
        return flat, np.arange(total, dtype=np.int64)
    blocks = list(dict.fromkeys(flat))
    index = dict(zip(blocks, range(len(blocks)), strict=True))
    return blocks, np.fromiter(map(index.__getitem__, flat), np.int64, total)


Cover = list[tuple[Run, int, int]]  # BlockTable.cover: (run, start, end) in request order


@dataclass(frozen=True)
class ChainBlocks:
    blocks: list[int]  # the distinct blocks, first seen first
    where: np.ndarray  # per block of the concatenated chains, its index in ``blocks``
    codes: np.ndarray  # per distinct block, its code (0: no state)
    slots: np.ndarray  # the distinct slots of ``codes``, sorted

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct runs' slots, each block's index among them and its index in its run
        (what :func:`kvcast.features.online.rows.assemble_rows` groups the rows by)."""
        return self.slots, np.searchsorted(self.slots, self.codes >> SHIFT), self.codes & MASK


def _expand(firsts: list[int], sizes: list[int]) -> np.ndarray:
    """Every code of ranges of consecutive codes (their first codes and sizes), in order."""
    size = np.array(sizes, np.int64)
    starts = np.zeros(len(size), np.int64)
    np.cumsum(size[:-1], out=starts[1:])
    return np.repeat(np.array(firsts, np.int64) - starts, size) + np.arange(sum(sizes))


def _agreed(ch: tuple[int, ...], i: int, hs: tuple[int, ...], lo: int, m: int) -> int:
    """How many of the ``m`` blocks from ``ch[i]`` agree with those from ``hs[lo]`` before one
    differs (the first does): compared in windows that double, so the cost follows the blocks
    agreed on, not ``m``. Both tuples (a list never equals a tuple)."""
    k, step = 1, 8
    while k < m:
        end = min(m, k + step)
        mine, theirs = ch[i + k : i + end], hs[lo + k : lo + end]
        if mine != theirs:
            return k + next(compress(count(), map(ne, mine, theirs)))
        k, step = end, 2 * step
    return m


def chain_blocks(
    table: BlockTable,
    chains: Sequence[Sequence[int]],
    covers: Sequence[Cover | None] | None = None,
) -> ChainBlocks | None:
    """The chains' distinct blocks, their codes and each chain block's index among them, read
    run by run; None where the plain reading must be used (a negative hash: ``code_of`` keys
    are canonical u64; or the chains name two parts of one run with blocks between them that
    none names, which chains of applied requests never do). ``chains``: tuples, or other
    sequences (each read as a tuple: the comparisons with the runs' own are of tuples).
    ``covers``: per chain, the :meth:`BlockTable.cover` of a request whose blocks (deduped)
    start with the chain, or None; a cover's runs that are still whole are read without a
    block of theirs (see the module's docstring)."""
    get, slot_runs, hashes_at = table.code_of.get, table.slot_runs, table.k + HASHES
    last_at, horizon, latest, slot_at = table.k + LAST, table.horizon, table.latest, table.k + SLOT
    # slot -> the run's indices named so far [lo, hi) and where index lo is among the distinct
    # blocks (while they are one range there: else -1)
    covered: dict[int, tuple[int, int, int]] = {}
    dead: dict[int, tuple[int, int]] = {}  # a block without state -> its stand-in code
    # (negative) and where it is among the distinct blocks
    total = 0  # distinct blocks so far
    split = False  # some run's named indices are two ranges among the distinct blocks
    firsts: list[int] = []  # the distinct blocks as ranges of consecutive codes, in order:
    sizes: list[int] = []  # their first codes, sizes
    named: list[tuple[int, ...]] = []  # and hashes
    chain_firsts: list[int] = []  # the chains' blocks as such ranges
    chain_sizes: list[int] = []
    chain_at: list[int] = []  # and where each range starts among the distinct blocks
    if covers is None:
        covers = [None] * len(chains)
    for ch, cover in zip(map(tuple, chains), covers, strict=True):  # (a tuple is itself)
        i, n = 0, len(ch)
        pieces = cover or ()
        k, known = 0, len(pieces)
        while i < n:
            run: Run | None = None
            if k < known:  # the cover's next run, if it is still whole: no block read
                run, start, end = pieces[k]
                k += 1
                hs = run[hashes_at]
                slot = run[slot_at]
                if (
                    len(hs) == end - start
                    and slot_runs[slot] is run
                    and run[last_at] + horizon > latest
                ):
                    code, lo, m = slot << SHIFT, 0, (end if end < n else n) - i
                else:
                    run, known = None, 0  # from here on, block by block
            if run is None:
                h = ch[i]
                code = get(h)
                if code is None:  # no state: one block, deduped by hash
                    if h < 0:
                        return None
                    got = dead.get(h)
                    if got is None:
                        got = dead[h] = (-1 - len(dead), total)
                        firsts.append(got[0])
                        sizes.append(1)
                        named.append((h,))
                        total += 1
                    chain_firsts.append(got[0])
                    chain_sizes.append(1)
                    chain_at.append(got[1])
                    i += 1
                    continue
                slot, lo = code >> SHIFT, code & MASK
                run = slot_runs[slot]  # a code's run is there
                hs = run[hashes_at]  # type: ignore[index]
                m = len(hs) - lo
                if m > n - i:
                    m = n - i
                if m > 1:
                    if run[last_at] + horizon <= latest:  # type: ignore[index]
                        m = 1  # some of its blocks may be another run's now: block by block
                    elif ch[i + m - 1] != hs[lo + m - 1]:  # departs from the run
                        m = _agreed(ch, i, hs, lo, m)
                    elif lo == 0 and m == len(hs):  # the whole run (the usual case)
                        if (ch if m == n else ch[i : i + m]) != hs:
                            m = _agreed(ch, i, hs, lo, m)
                    elif ch[i : i + m] != hs[lo : lo + m]:
                        m = _agreed(ch, i, hs, lo, m)
            hi = lo + m
            chain_firsts.append(code)
            chain_sizes.append(m)
            seen = covered.get(slot)
            if seen is None:
                covered[slot] = (lo, hi, total)
                firsts.append(code)
                sizes.append(m)
                named.append(hs if m == len(hs) else hs[lo:hi])
                chain_at.append(total)
                total += m
            elif lo < seen[0] or hi > seen[1]:
                a, b, _ = seen
                if hi < a or lo > b:  # a gap between what the chains name of the run
                    return None
                if lo < a:
                    firsts.append(code)
                    sizes.append(a - lo)
                    named.append(hs[lo:a])
                    total += a - lo
                if hi > b:
                    firsts.append(slot << SHIFT | b)
                    sizes.append(hi - b)
                    named.append(hs[b:hi])
                    total += hi - b
                covered[slot] = (min(a, lo), max(b, hi), -1)
                split = True  # (where its blocks are: found from the codes below)
            else:
                chain_at.append(seen[2] + lo - seen[0])
            i += m
    if not chain_firsts:
        none = np.zeros(0, np.int64)
        return ChainBlocks([], none, none, none)
    keys = _expand(firsts, sizes)
    if total == sum(chain_sizes):  # no block named twice: first seen is chain order
        where = np.arange(total, dtype=np.int64)
    elif not split:  # each chain range is one range among the distinct blocks
        where = _expand(chain_at, chain_sizes)
    else:
        order = np.argsort(keys)
        where = order[np.searchsorted(keys, _expand(chain_firsts, chain_sizes), sorter=order)]
    slots = sorted(covered)
    if dead:
        slots.insert(0, 0)
    return ChainBlocks(
        list(chain.from_iterable(named)),
        where,
        np.maximum(keys, 0),  # the stand-ins: code 0
        np.array(slots, np.int64),
    )
