"""A text trace's source file: its default name, how it is opened, what is done with bad lines."""

from __future__ import annotations

import gc
import gzip
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from kvcast.features.traces.table import LoadReport, TraceError

TRACE_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")
GZIP_MAGIC = b"\x1f\x8b"
STREAM_ERRORS = (OSError, EOFError, zlib.error)  # what reading a (gzip) stream can raise


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
        self.truncated_after: int | None = None

    def reject(self, line: int, reason: str) -> None:
        """Raise ``TraceError("FILE:LINE: reason")``, or record it when skipping bad lines."""
        message = f"{self.source}:{line}: {reason}"
        if not self.skip_bad:
            raise TraceError(message)
        self.count += 1
        if len(self.first) < self.KEEP:
            self.first.append(message)

    def broken(self, after: int, exc: BaseException) -> None:
        """The stream broke off after physical line ``after`` (0: before the first line).

        A truncated or corrupt compressed stream raises ``TraceError`` naming the file and the
        last line read, or, when skipping bad lines, counts the rest of the file as one bad
        line and keeps the lines before it (``truncated_after`` in the report). Any other read
        error always raises."""
        where = f"after line {after}" if after else "before its first line"
        if isinstance(exc, EOFError):
            reason = f"truncated {where}: the compressed stream ends early"
        elif isinstance(exc, zlib.error | gzip.BadGzipFile):
            reason = f"corrupt compressed stream {where} ({exc})"
        else:
            raise TraceError(f"{self.source}: cannot read {where} ({exc})") from None
        if not self.skip_bad:
            hint = "; the lines after it are lost (--skip-bad keeps the lines before it)"
            raise TraceError(f"{self.source}: {reason}{hint if after else ''}") from None
        self.truncated_after = after
        self.reject(after + 1, f"{reason}; the rest of the file is lost")

    def report(self, *, lines: int, reordered: bool) -> LoadReport:
        return LoadReport(lines, self.count, reordered, tuple(self.first), self.truncated_after)
