"""A block's state as one int: ``slot << SHIFT | index of the block in its run``.

:class:`kvcast.features.online.blocks.BlockTable` keeps ``code_of: hash -> code`` and
``slot_runs: slot -> run``; :class:`RunOf` reads them as a ``hash -> run`` mapping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import compress
from operator import eq
from typing import Any

SHIFT = 32
MASK = (1 << SHIFT) - 1
Run = list[Any]


def named(code_of: dict[int, int], hashes: tuple[int, ...], slot: int) -> Iterator[int]:
    """Those of a run's ``hashes`` whose codes still name its ``slot`` (C-level, in order)."""
    code = slot << SHIFT
    return compress(hashes, map(eq, map(code_of.get, hashes), range(code, code + len(hashes))))


class RunOf(Mapping[int, Run]):
    """``hash -> run``, read from the codes (a view: it follows the table)."""

    def __init__(self, code_of: dict[int, int], slot_runs: list[Run | None]) -> None:
        self._codes, self._runs = code_of, slot_runs

    def __getitem__(self, h: int) -> Run:
        run = self._runs[self._codes[h] >> SHIFT]
        assert run is not None
        return run

    def __contains__(self, h: object) -> bool:
        return h in self._codes

    def __iter__(self) -> Iterator[int]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)
