"""The decision log: every decision the sidecar makes, one Parquet row each (shadow mode's
record, and active mode's too).

The log is written in row groups (one per ``rows_per_chunk`` decisions, or sooner when the
oldest unwritten row is ``flush_s`` old) and in parts: a part is closed, its footer written,
once it holds ``rotate_rows`` rows or has been open ``rotate_s`` seconds (checked on every
decision tick, rows or not), and the next rows start the next part. Parquet can read nothing
of a file without its footer, so a killed sidecar (SIGKILL, OOM, power loss) loses the rows
of its open part and those not yet written, never the closed parts: a minute's rows at most
with the defaults.

Names: a run's first part is ``path`` itself (``decisions.parquet``) and names the run; part
``n`` (2, 3, ...) is ``<stem>.part-<n:04d><suffix>`` beside it (``decisions.part-0002.parquet``).
A run never overwrites an earlier run's files: when ``path`` or any of its parts exists, the
run is ``<stem>.1.parquet`` (parts ``<stem>.1.part-0002.parquet``, ...), else
``<stem>.2.parquet``, and so on. ``kvcast shadow-eval`` given a run's first part reads all
its parts in order (given the directory, every run's), skipping a part with no footer.

Columns (a contract for ``kvcast shadow-eval``; times are unix milliseconds):

=================  ==============  ============================================================
``ts_ms``          float64         the decision tick's time
``decision_id``    string          ``<sidecar_id>-<run>-<n>``: unique across runs (the agents'
                                   command id)
``tick``           int64           the tick's number
``mode``           string          ``shadow`` or ``active``
``kind``           string          ``replicate``, ``promote`` or ``evict``
``source``         int32           source node id (-1: none, an eviction)
``target``         int32           target node id (the node evicted from, for an eviction)
``source_name``    string          source node name ("" when none)
``target_name``    string          target node name
``tenant``         string          the chain's tenant ("" for an eviction)
``block_hashes``   list<uint64>    replicate: the chain root-first, up to the copy's end (the
                                   last ``blocks_moved`` are copied); evict: the blocks
``blocks_moved``   int32           blocks the command moves (or evicts)
``bytes``          int64           ``blocks_moved x`` KV bytes per block
``p_blocks``       list<float64>   the scorer's burst probability of each listed block
``p_hit``          float64         the decider's P(hit) for the copy (NaN for an eviction)
``saved_ms``       float64         critical-path time saved on a hit
``transfer_ms``    float64         weighted transfer cost (incl. tier penalty)
``congestion_ms``  float64         congestion cost
``memory_ms``      float64         memory-pressure cost
``reclaim_ms``     float64         misprediction reclaim cost
``holder_queue_ms`` float64        delay without the copy (queue + fetch at the router's pick)
``target_queue_ms`` float64        predicted queue at the target
``net_ms``         float64         ``p_hit x saved_ms - (transfer + congestion + memory +
                                   reclaim)``
``priority``       int32           0: the most valuable command of its tick
``ttl_ms``         float64         the replica's time to live
``deadline_ms``    float64         predicted first use (NaN: unknown)
``reason``         string          the reason as one line
``model``          string          digest of the model that scored it ("" for an eviction)
=================  ==============  ============================================================
"""

from __future__ import annotations

import glob
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kvcast.serving.sidecar.decisions import Decision

NAN = math.nan
TERMS = ("p_hit", "saved_ms", "transfer_ms", "congestion_ms", "memory_ms", "reclaim_ms",
         "holder_queue_ms", "target_queue_ms")  # fmt: skip
SCHEMA = pa.schema(
    [("ts_ms", pa.float64()), ("decision_id", pa.string()), ("tick", pa.int64()),
     ("mode", pa.string()), ("kind", pa.string()), ("source", pa.int32()),
     ("target", pa.int32()), ("source_name", pa.string()), ("target_name", pa.string()),
     ("tenant", pa.string()), ("block_hashes", pa.list_(pa.uint64())),
     ("blocks_moved", pa.int32()), ("bytes", pa.int64()), ("p_blocks", pa.list_(pa.float64())),
     *[(t, pa.float64()) for t in TERMS], ("net_ms", pa.float64()), ("priority", pa.int32()),
     ("ttl_ms", pa.float64()), ("deadline_ms", pa.float64()), ("reason", pa.string()),
     ("model", pa.string())]
)  # fmt: skip

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


def _name(names: tuple[str, ...], node: int) -> str:
    return names[node] if 0 <= node < len(names) else ""


def row(d: Decision, names: tuple[str, ...]) -> dict[str, Any]:
    r = d.reason
    moved = r.blocks_moved if r is not None else len(d.block_hashes)
    out = {
        "ts_ms": d.ts_ms, "decision_id": d.id, "tick": d.tick, "mode": d.mode, "kind": d.kind,
        "source": d.source, "target": d.target, "source_name": _name(names, d.source),
        "target_name": _name(names, d.target), "tenant": d.tenant,
        "block_hashes": list(d.block_hashes), "blocks_moved": moved, "bytes": d.nbytes,
        "p_blocks": list(d.p_blocks),
        "net_ms": r.net_ms if r is not None else NAN, "priority": d.priority,
        "ttl_ms": d.ttl_ms, "deadline_ms": d.deadline_ms, "reason": d.text, "model": d.model,
    }  # fmt: skip
    for t in TERMS:
        out[t] = getattr(r, t) if r is not None else NAN
    return out


class DecisionLog:
    """The log of one run: ``path`` names it (its first part, or the free name beside it that
    :func:`free_path` picks); ``parts`` lists the parts closed so far, readable as they are."""

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
        if not rotate_rows >= 1:
            raise ValueError(f"decision log rotate_rows must be a count >= 1, got {rotate_rows}")
        if not 0 < rotate_s < math.inf:
            raise ValueError(f"decision log rotate_s must be a finite time > 0, got {rotate_s}")
        self.path = free_path(Path(path))
        try:  # a directory that cannot exist is a config error, not rows lost at every flush
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"decision_log.path {str(path)!r}: cannot create its directory "
                             f"({err.strerror or err})") from None  # fmt: skip
        self.names, self.rows_per_chunk, self.flush_s = names, rows_per_chunk, flush_s
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

    def add(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        if not self._rows:
            self._oldest = self.clock()
        self._rows.extend(row(d, self.names) for d in decisions)
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
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            if self._writer is None:
                self._open_part()
            assert self._writer is not None
            self._writer.write_table(table, row_group_size=max(len(rows), 1))
        except (OSError, pa.ArrowException) as err:
            self.lost += len(rows)
            if str(err) != self.last_error:  # once per distinct error, not once per tick
                log.warning("decision log %s: %d rows lost: %s", self._part_path, len(rows), err)
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
        self._writer = pq.ParquetWriter(path, SCHEMA)
        self._part, self._part_path = n, path
        self._part_rows, self._opened = 0, self.clock()

    def _close_part(self) -> None:
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
        except (OSError, pa.ArrowException) as err:
            log.warning("decision log %s: closing failed, its %d rows are lost: %s",
                        self._part_path, self._part_rows, err)  # fmt: skip
            return
        self.parts.append(self._part_path)

    def close(self) -> None:
        self.flush()
        self._close_part()
