"""Mooncake JSONL traces (the FAST'25 release format), plain or gzip-compressed.

One JSON object per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2353]}

``timestamp`` is ms since the trace start, lengths are tokens, ``hash_ids`` are the prompt's
prefix block hashes (512 tokens a block; 64-bit: u64 as vLLM's, or negative int64, kept as
written). Optional keys kept when present: ``request_id``, ``tenant``, ``session`` (or its
alias ``session_id``: a null in one does not hide the other; two different values are an
error), ``chat_id`` and ``parent_chat_id`` (Alibaba-style, kept as written: a root's ``-1``
stays ``-1``). Other keys are ignored. Values are kept as they are; a request whose
``hash_ids`` are not ``input_length`` in whole blocks (the released traces have none) is
counted in the load report with its line, since the simulator computes with the tokens and
stores the blocks. A truncated or corrupt gzip stream is an error naming the last line read
(``skip_bad``: the lines before it are kept and the cut is counted and reported).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvcast.features.traces.mooncake_record import BadRecord, Extra, Row, parse_line, read_record
from kvcast.features.traces.source import (
    STREAM_ERRORS,
    BadLines,
    gc_paused,
    open_binary,
    trace_name,
)
from kvcast.features.traces.table import (
    DEFAULT_TENANT,
    Trace,
    TraceError,
    make_table,
    sort_by_arrival,
)

DEFAULT_BLOCK_SIZE = 512


class _Columns:
    """The table's columns, gathered line by line."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.uncovered = 0  # rows whose hash_ids are not input_length in whole blocks
        self.first_uncovered = ""
        self.rows: list[Row] = []
        self.extra: list[Extra] = []
        self.seen: dict[str, int] = {}  # explicit request ids -> their line
        self.generated: list[int] = []  # rows whose id was made from the line (r<line>)

    def add(self, line: int, rec: dict[str, Any]) -> None:
        row, extra = read_record(rec, line)
        if rec.get("request_id") is None:
            self.generated.append(len(self.rows))
        else:
            rid = row[-1]
            if rid in self.seen:
                raise BadRecord(f"duplicate request_id {rid!r} (first on line {self.seen[rid]})")
            self.seen[rid] = line
        self.rows.append(row)
        self.extra.append(extra)
        tokens, blocks = rec["input_length"], len(rec["hash_ids"])
        if blocks != -(-tokens // self.block_size):  # the released traces: always equal
            self.uncovered += 1
            if not self.first_uncovered:
                self.first_uncovered = (f"line {line}: input_length {tokens:,}, {blocks:,} "
                                        f"hash_ids of {self.block_size} tokens")  # fmt: skip

    def _unique_ids(self) -> None:
        """A made-up id that an explicit one anywhere in the file already took gets ``~n``."""
        taken = set(self.seen)
        for i in self.generated:
            rid = self.rows[i][-1]
            if rid in taken:
                n = 1
                while f"{rid}~{n}" in taken:
                    n += 1
                rid = f"{rid}~{n}"
                self.rows[i] = (*self.rows[i][:-1], rid)
            taken.add(rid)

    def table(self) -> pd.DataFrame:
        if self.seen:  # (no explicit id: the made-up ids are distinct lines)
            self._unique_ids()
        arrival, inputs, outputs, hashes, ids = zip(*self.rows, strict=True)
        tenant, session, chat, parent = zip(*self.extra, strict=True)
        return make_table(
            arrival_ms=np.fromiter(arrival, np.float64, len(arrival)),
            input_tokens=np.fromiter(inputs, np.int64, len(inputs)),
            output_tokens=np.fromiter(outputs, np.int64, len(outputs)),
            block_hashes=list(hashes),
            request_id=list(ids),
            tenant=[t or DEFAULT_TENANT for t in tenant] if any(tenant) else None,
            session=list(session) if any(s is not None for s in session) else None,
            chat_id=list(chat) if any(c is not None for c in chat) else None,
            parent_chat_id=list(parent) if any(p is not None for p in parent) else None,
        )


def load_mooncake(
    path: str | Path,
    *,
    skip_bad: bool = False,
    name: str | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> Trace:
    """Load a Mooncake JSONL (or ``.jsonl.gz``) trace into the canonical table."""
    bad = BadLines(str(path), skip_bad=skip_bad)
    columns = _Columns(block_size)
    lines = lineno = 0
    with gc_paused(), open_binary(path) as stream:
        try:
            for lineno, raw in enumerate(stream, 1):
                if not raw.strip():
                    continue
                lines += 1
                try:
                    columns.add(lineno, parse_line(raw))
                except BadRecord as exc:
                    bad.reject(lineno, str(exc))
        except STREAM_ERRORS as exc:
            bad.broken(lineno, exc)
    if not columns.rows:
        skipped = f" ({bad.count} bad lines skipped; first: {bad.first[0]})" if bad.count else ""
        raise TraceError(f"{path}: contains no requests{skipped}")
    requests, reordered = sort_by_arrival(columns.table())
    return Trace(
        requests=requests,
        name=name or trace_name(path),
        block_size=block_size,
        source=str(path),
        report=replace(
            bad.report(lines=lines, reordered=reordered),
            uncovered=columns.uncovered,
            first_uncovered=columns.first_uncovered,
        ),
    )
