"""A text trace's source file: its default name, how it is opened, what is done with bad lines."""

from __future__ import annotations

import gc
import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from kvcast.features.traces.table import LoadReport, TraceError

TRACE_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")
GZIP_MAGIC = b"\x1f\x8b"


def trace_name(path: str | Path) -> str:
    """A trace's default name: the file name without its trace suffixes."""
    name = Path(path).name.removesuffix(".gz")
    for suffix in TRACE_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def open_binary(path: str | Path) -> BinaryIO:
    """Open a trace file for reading bytes, decompressing gzip; errors name the file."""
    p = Path(path)
    try:
        with p.open("rb") as probe:
            compressed = probe.read(2) == GZIP_MAGIC
        return gzip.open(p, "rb") if compressed else p.open("rb")  # type: ignore[return-value]
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot open ({exc.strerror or exc})") from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file's rows are parsed.

    Parsing allocates one small dict and list per line and frees none of them, so the collector's
    full passes only rescan live objects; in a big process they cost more than the parse.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def show(value: object, limit: int = 60) -> str:
    """``repr`` of an offending value, cut short so that one bad line gives one short message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BadLines:
    """A loader's policy for bad input lines: raise on the first, or count and skip them all."""

    KEEP = 5

    def __init__(self, source: str, *, skip_bad: bool) -> None:
        self.source = source
        self.skip_bad = skip_bad
        self.count = 0
        self.first: list[str] = []

    def reject(self, line: int, reason: str) -> None:
        """Raise ``TraceError("FILE:LINE: reason")``, or record it when skipping bad lines."""
        message = f"{self.source}:{line}: {reason}"
        if not self.skip_bad:
            raise TraceError(message)
        self.count += 1
        if len(self.first) < self.KEEP:
            self.first.append(message)

    def report(self, *, lines: int, reordered: bool) -> LoadReport:
        return LoadReport(lines, self.count, reordered, tuple(self.first))
