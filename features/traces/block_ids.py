"""Block ids (prefix block hashes) of a trace: 64-bit values, written either way.

vLLM's block hashes are u64, so a trace may hold any id in ``0 .. 2**64 - 1``; kvcast's own
traces may also hold negative int64 ids (``-2**63 .. -1``). Downstream
(:func:`kvcast.features.validate.canonical`) a negative id is the u64 it wraps to, so both
spellings name 64-bit patterns: an id is valid when it lies in ``-2**63 .. 2**64 - 1``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from itertools import pairwise

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
U64_MAX = 2**64 - 1
ID_RANGE = "0 .. 2**64 - 1, or a negative int64"


def is_block_id(value: int) -> bool:
    """Whether ``value`` is a 64-bit block id in one of the two spellings."""
    return INT64_MIN <= value <= U64_MAX


def _space(ids: Collection[int]) -> tuple[list[int] | Collection[int], int, int]:
    """``ids`` as compared for freshness, and the range fresh ids stay in: int64 when every id
    fits it (kvcast's own traces), else u64 with every id as u64 (a negative one as the u64
    it wraps to), so that no fresh id names one of the trace's blocks downstream (``-1`` is
    ``2**64 - 1`` there) and every fresh id fits a uint64 column."""
    if ids and max(ids) > INT64_MAX:
        return [h & U64_MAX for h in ids], 0, U64_MAX
    return ids, INT64_MIN, INT64_MAX


def fresh_ids(ids: Collection[int]) -> Iterator[int]:
    """Ids that none of ``ids`` (a trace's block ids) name, in this order: counting up from
    above the highest, then down from below the lowest, then in the gaps between them."""
    view, floor, ceiling = _space(ids)
    low, high = min(view, default=0), max(view, default=-1)
    yield from range(high + 1, ceiling + 1)
    yield from range(low - 1, floor - 1, -1)
    for a, b in pairwise(sorted(set(view))):
        yield from range(a + 1, b)


def fresh_run(ids: Collection[int], count: int) -> int | None:
    """The first of ``count`` consecutive ids that none of ``ids`` name: right above the
    highest, else ending right below the lowest, else in the first gap between them wide
    enough; ``None`` when 64 bits have no such run."""
    view, floor, ceiling = _space(ids)
    low, high = min(view, default=0), max(view, default=-1)
    if high + count <= ceiling:
        return high + 1
    if low - count >= floor:
        return low - count
    return next((a + 1 for a, b in pairwise(sorted(set(view))) if b - a - 1 >= count), None)
