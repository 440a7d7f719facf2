"""A Parquet log written in parts, the sidecar's on-disk record (:mod:`.decision_log`,
:mod:`.routes_log`).

Rows are written in row groups (one per ``rows_per_chunk`` rows, or sooner when the oldest
unwritten row is ``flush_s`` old) and in parts: a part is closed, its footer written, once it
holds ``rotate_rows`` rows or has been open ``rotate_s`` seconds (checked on every decision
tick, rows or not), and the next rows start the next part. Parquet can read nothing of a file
without its footer, so a killed sidecar (SIGKILL, OOM, power loss) loses the rows of its open
part and those not yet written, never the closed parts.

Names: a run's first part is ``path`` itself and names the run; part ``n`` (2, 3, ...) is
``<stem>.part-<n:04d><suffix>`` beside it. A run never overwrites an earlier run's files: when
``path`` or any of its parts exists, the run is ``<stem>.1<suffix>`` (parts
``<stem>.1.part-0002<suffix>``, ...), else ``<stem>.2<suffix>``, and so on.
"""

from __future__ import annotations

import glob
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

ROTATE_ROWS = 100_000  # a part is closed at this many rows
ROTATE_S = 60.0  # or once it has been open this long
PART = ".part-"  # part n >= 2 of a run is <stem>.part-<n:04d><suffix>


def part_path(first: Path, n: int) -> Path:
    """Part ``n`` (1, 2, ...) of the run whose first part is ``first``."""
    return first if n == 1 else first.with_name(f"{first.stem}{PART}{n:04d}{first.suffix}")


def _taken(first: Path) -> bool:
    """Whether a run named ``first`` has left any file: its first part or any later one."""
    parts = f"{glob.escape(first.stem)}{PART}*{glob.escape(first.suffix)}"
    return first.exists() or any(first.parent.glob(parts))


def free_path(path: Path) -> Path:
    """``path``, or the first ``<stem>.<n><suffix>`` beside it that no run has used (neither
    it nor any of its parts exists)."""
    n = 0
    out = path
    while _taken(out):
        n += 1
        out = path.with_name(f"{path.stem}.{n}{path.suffix}")
    return out


class PartedLog:
    """One run of a log of ``SCHEMA`` rows: ``path`` names it (its first part, or the free
    name beside it that :func:`free_path` picks); ``parts`` lists the parts closed so far,
    readable as they are. Subclasses hand rows to :meth:`hold`."""

    SCHEMA: ClassVar[pa.Schema]
    LABEL: ClassVar[str]  # "decision log": names it in errors and warnings
    KEY: ClassVar[str]  # "decision_log": its config key

    def __init__(
        self,
        path: str | Path,
        names: tuple[str, ...],
        rows_per_chunk: int,
        flush_s: float,
        *,
        rotate_rows: int = ROTATE_ROWS,
        rotate_s: float = ROTATE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.names = names  # node names by id (the rows name their nodes)
        if not rotate_rows >= 1:
            raise ValueError(f"{self.LABEL} rotate_rows must be a count >= 1, got {rotate_rows}")
        if not 0 < rotate_s < math.inf:
            raise ValueError(f"{self.LABEL} rotate_s must be a finite time > 0, got {rotate_s}")
        if Path(path).is_dir():  # else its rows would go to <path>.1 beside it, unannounced
            raise ValueError(f"{self.KEY}.path {str(path)!r} is a directory: name a file in it, "
                             f"e.g. {str(Path(path) / (self.KEY + '.parquet'))!r}")  # fmt: skip
        self.path = free_path(Path(path))
        try:  # a directory that cannot exist is a config error, not rows lost at every flush
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"{self.KEY}.path {str(path)!r}: cannot create its directory "
                             f"({err.strerror or err})") from None  # fmt: skip
        self.rows_per_chunk, self.flush_s = rows_per_chunk, flush_s
        self.rotate_rows, self.rotate_s, self.clock = rotate_rows, rotate_s, clock
        self._rows: list[dict[str, Any]] = []
        self._oldest = 0.0
        self._writer: pq.ParquetWriter | None = None
        self._part = 0  # the number of the last part opened
        self._part_path = self.path  # the part being written (while _writer is open)
        self._part_rows = 0  # rows written to it
        self._opened = 0.0  # when it was opened (clock)
        self.parts: list[Path] = []  # parts closed with their footer, in order
        self.written = 0  # rows written to the log
        self.chunks = 0  # row groups written
        self.lost = 0  # rows dropped because the file could not be written
        self.last_error: str | None = None

    def hold(self, rows: list[dict[str, Any]]) -> None:
        """Keep ``rows`` for the next row group, and write it when due."""
        if not rows:
            return
        if not self._rows:
            self._oldest = self.clock()
        self._rows.extend(rows)
        self.maybe_flush()

    def maybe_flush(self) -> None:
        """Write the rows held when due, and close the part once it is ``rotate_s`` old; the
        decision loop calls it every tick, so an idle log's part closes on time too."""
        now = self.clock()
        due = self._rows and now - self._oldest >= self.flush_s
        if len(self._rows) >= self.rows_per_chunk or due:
            self.flush()
        if self._writer is not None and now - self._opened >= self.rotate_s:
            self.flush()  # the rows held go with the part they were made in
            self._close_part()

    def flush(self) -> None:
        """Write the rows held as one row group (and close the part once it holds
        ``rotate_rows``). A failure (disk full, a path that cannot be created) drops them,
        counted in ``lost`` and logged, and the next flush tries again: the rows never pile
        up and the caller (the decision tick) never sees the error."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        try:
            table = pa.Table.from_pylist(rows, schema=self.SCHEMA)
            if self._writer is None:
                self._open_part()
            assert self._writer is not None
            self._writer.write_table(table, row_group_size=max(len(rows), 1))
        except (OSError, pa.ArrowException) as err:
            self.lost += len(rows)
            if str(err) != self.last_error:  # once per distinct error, not once per tick
                log.warning("%s %s: %d rows lost: %s", self.LABEL, self._part_path, len(rows),
                            err)  # fmt: skip
            self.last_error = str(err)
            return
        self.written += len(rows)
        self.chunks += 1
        self._part_rows += len(rows)
        if self._part_rows >= self.rotate_rows:
            self._close_part()

    def _open_part(self) -> None:
        n = self._part + 1
        path = part_path(self.path, n)
        while n > 1 and path.exists():  # never over a file this run did not write
            n += 1
            path = part_path(self.path, n)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(path, self.SCHEMA)
        self._part, self._part_path = n, path
        self._part_rows, self._opened = 0, self.clock()

    def _close_part(self) -> None:
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
        except (OSError, pa.ArrowException) as err:
            log.warning("%s %s: closing failed, its %d rows are lost: %s",
                        self.LABEL, self._part_path, self._part_rows, err)  # fmt: skip
            return
        self.parts.append(self._part_path)

    def close(self) -> None:
        self.flush()
        self._close_part()
