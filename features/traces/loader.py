"""One entry point for every trace format: ``load_trace(path)`` and format detection."""

from __future__ import annotations

import csv
from pathlib import Path

from kvcast.features.traces.azure import load_azure
from kvcast.features.traces.mooncake import load_mooncake
from kvcast.features.traces.parquet_io import read_parquet
from kvcast.features.traces.source import STREAM_ERRORS, open_binary
from kvcast.features.traces.table import Trace, TraceError

TRACE_FORMATS: tuple[str, ...] = ("mooncake", "azure", "parquet")
_BY_SUFFIX = {".jsonl": "mooncake", ".json": "mooncake", ".csv": "azure", ".parquet": "parquet"}
_SNIFF_BYTES = 512


def _valid() -> str:
    return f"valid formats: auto, {', '.join(TRACE_FORMATS)}"


def _require_file(path: Path) -> None:
    if not path.exists():  # (the formats are no help here: the file is missing)
        raise TraceError(f"{path}: no such trace file (or bundled:NAME for a bundled sample)")
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file"
        raise TraceError(f"{path}: {what}, not a trace file")


def _sniff(head: bytes) -> str | None:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"PAR1"):
        return "parquet"
    if text.startswith(b"{"):
        return "mooncake"
    first = text.split(b"\n", 1)[0].decode("utf-8", "replace")
    header = next(csv.reader([first]), [])  # as the Azure reader parses it (quotes too)
    if {"TIMESTAMP", "ContextTokens"} <= {f.strip() for f in header}:
        return "azure"
    return None


def detect_format(path: str | Path) -> str:
    """The format of a trace file: by its suffix, else by its first bytes."""
    p = Path(path)
    _require_file(p)
    suffixes = [s.lower() for s in p.suffixes[-2:]]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    if suffixes and suffixes[-1] in _BY_SUFFIX:
        return _BY_SUFFIX[suffixes[-1]]
    try:
        with open_binary(p) as stream:
            head = stream.read(_SNIFF_BYTES)
    except STREAM_ERRORS as exc:  # a truncated or corrupt gzip file too
        raise TraceError(f"{p}: cannot read ({exc or type(exc).__name__})") from None
    found = _sniff(head)
    if found is None:
        raise TraceError(f"{p}: cannot tell the trace format from its name or content ({_valid()})")
    return found


def load_trace(
    path: str | Path,
    format: str = "auto",
    *,
    skip_bad: bool = False,
    name: str | None = None,
    block_size: int | None = None,
) -> Trace:
    """Load a trace in any supported format into the canonical :class:`Trace`.

    ``skip_bad`` skips (and counts) malformed lines of text formats instead of raising;
    ``block_size`` overrides the format's default (or the Parquet file's stored value).
    """
    if format != "auto" and format not in TRACE_FORMATS:
        raise TraceError(f"{path}: unknown trace format {format!r} ({_valid()})")
    _require_file(Path(path))
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "parquet":
        return read_parquet(path, name=name, block_size=block_size)
    load = load_mooncake if fmt == "mooncake" else load_azure
    if block_size is None:
        return load(path, skip_bad=skip_bad, name=name)
    return load(path, skip_bad=skip_bad, name=name, block_size=block_size)
