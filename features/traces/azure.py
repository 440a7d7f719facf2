"""Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

``TIMESTAMP`` is a date-time string such as ``2023-11-16 18:15:46.6805900`` (up to 9 fraction
digits, optionally with a UTC offset, which is then converted to UTC). Arrivals become ms since
the earliest request (the first row of a sorted file). The source has no block ids: every
``block_hashes`` is an empty list (a cache-less trace); nothing is synthesised.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from kvcast.features.traces.source import (
    STREAM_ERRORS,
    BadLines,
    gc_paused,
    open_binary,
    show,
    trace_name,
)
from kvcast.features.traces.table import Trace, TraceError, make_table, sort_by_arrival

DEFAULT_BLOCK_SIZE = 512
TIME_COLUMN, INPUT_COLUMN, OUTPUT_COLUMN = "TIMESTAMP", "ContextTokens", "GeneratedTokens"
AZURE_COLUMNS: tuple[str, ...] = (TIME_COLUMN, INPUT_COLUMN, OUTPUT_COLUMN)

_STAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
_EPOCH = datetime(1970, 1, 1)
_INT64 = 2**63  # arrivals are int64 ns since the epoch


class _BadRow(Exception):
    """One row's reason for rejection (becomes ``FILE:LINE: reason``)."""


def parse_timestamp_ns(text: str) -> int:
    """Nanoseconds since the Unix epoch of an Azure ``TIMESTAMP`` (naive means UTC)."""
    match = _STAMP.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a date-time: {text!r}")
    whole, fraction, zone = match.groups()
    moment = datetime.fromisoformat(whole + (zone or ""))
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return micros * 1000 + int((fraction or "").ljust(9, "0"))


def _tokens(text: str, column: str) -> int:
    digits = text.strip()
    if not digits.isdigit() or not digits.isascii() or len(digits) > 18:
        raise _BadRow(f"{column} must be a non-negative int64, got {show(text)}")
    return int(digits)


class _Layout:
    """Where the three columns sit in a row, read from the header line."""

    def __init__(self, raw: bytes, path: str | Path, line: int) -> None:
        header = raw.decode("utf-8", "replace").strip()
        names = [name.strip() for name in next(csv.reader([header]))]
        for column in AZURE_COLUMNS:
            if column not in names:
                raise TraceError(f"{path}:{line}: missing column {column!r} (header: {header})")
        self.width = len(names)
        self.index = tuple(names.index(column) for column in AZURE_COLUMNS)

    def row(self, raw: bytes) -> tuple[int, int, int]:
        """``(timestamp_ns, context_tokens, generated_tokens)`` of one data line."""
        try:
            fields = next(csv.reader([raw.decode("utf-8")]))
        except UnicodeDecodeError:
            raise _BadRow("not UTF-8 text") from None
        except csv.Error as exc:
            raise _BadRow(f"not a CSV row ({exc})") from None
        if len(fields) != self.width:  # more: a stray comma would shift the columns read
            raise _BadRow(f"expected {self.width} fields, got {len(fields)}")
        stamp, context, generated = (fields[i] for i in self.index)
        try:
            ns = parse_timestamp_ns(stamp)
        except ValueError:
            raise _BadRow(f"{TIME_COLUMN} must be a date-time, got {show(stamp)}") from None
        if not -_INT64 <= ns < _INT64:
            span = "1677-09-21 and 2262-04-11 (int64 ns)"
            raise _BadRow(f"{TIME_COLUMN} must be within {span}, got {show(stamp)}")
        return ns, _tokens(context, INPUT_COLUMN), _tokens(generated, OUTPUT_COLUMN)


def load_azure(
    path: str | Path,
    *,
    skip_bad: bool = False,
    name: str | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> Trace:
    """Load an Azure LLM inference trace CSV into the canonical (cache-less) table."""
    bad = BadLines(str(path), skip_bad=skip_bad)
    layout: _Layout | None = None
    rows: list[tuple[int, int, int]] = []
    lines: list[int] = []
    count = lineno = 0
    with gc_paused(), open_binary(path) as stream:
        try:
            for lineno, raw in enumerate(stream, 1):
                text = raw.removeprefix(b"\xef\xbb\xbf") if lineno == 1 else raw
                if not text.strip():
                    continue
                if layout is None:
                    layout = _Layout(text, path, lineno)
                    continue
                count += 1
                try:
                    rows.append(layout.row(text))
                except _BadRow as exc:
                    bad.reject(lineno, str(exc))
                    continue
                lines.append(lineno)
        except STREAM_ERRORS as exc:
            bad.broken(lineno, exc)
    if not rows:
        skipped = f" ({bad.count} bad lines skipped; first: {bad.first[0]})" if bad.count else ""
        raise TraceError(f"{path}: contains no requests{skipped}")
    first, last = min(row[0] for row in rows), max(row[0] for row in rows)
    if last - first >= _INT64:  # int64 ns would wrap: arrivals silently wrong
        raise TraceError(f"{path}: timestamps span more than 292 years")
    ns, inputs, outputs = (np.asarray(column, dtype=np.int64) for column in zip(*rows, strict=True))
    table = make_table(
        arrival_ms=(ns - ns.min()) / 1e6,
        input_tokens=inputs,
        output_tokens=outputs,
        block_hashes=[[] for _ in rows],
        request_id=[f"r{line}" for line in lines],
    )
    requests, reordered = sort_by_arrival(table)
    return Trace(
        requests=requests,
        name=name or trace_name(path),
        block_size=block_size,
        source=str(path),
        report=bad.report(lines=count, reordered=reordered),
    )
