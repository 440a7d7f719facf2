"""The decision log: every decision the sidecar makes, one Parquet row each (shadow mode's
record, and active mode's too).

The file is written in row groups (one per ``rows_per_chunk`` decisions, or sooner when the
oldest unwritten row is ``flush_s`` old) and closed, with its footer, when the sidecar stops.
A run never overwrites an earlier run's log: when ``path`` exists, ``<stem>.1.parquet``,
``<stem>.2.parquet``, ... is used instead.

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

import logging
import math
import time
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


def free_path(path: Path) -> Path:
    """``path``, or the first ``<stem>.<n><suffix>`` beside it that does not exist."""
    n = 0
    out = path
    while out.exists():
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
    def __init__(
        self, path: str | Path, names: tuple[str, ...], rows_per_chunk: int, flush_s: float
    ) -> None:
        self.path = free_path(Path(path))
        try:  # a directory that cannot exist is a config error, not rows lost at every flush
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"decision_log.path {str(path)!r}: cannot create its directory "
                             f"({err.strerror or err})") from None  # fmt: skip
        self.names, self.rows_per_chunk, self.flush_s = names, rows_per_chunk, flush_s
        self._rows: list[dict[str, Any]] = []
        self._oldest = 0.0
        self._writer: pq.ParquetWriter | None = None
        self.written = 0  # rows written to the file
        self.chunks = 0  # row groups written
        self.lost = 0  # rows dropped because the file could not be written
        self.last_error: str | None = None

    def add(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        if not self._rows:
            self._oldest = time.monotonic()
        self._rows.extend(row(d, self.names) for d in decisions)
        self.maybe_flush()

    def maybe_flush(self) -> None:
        due = self._rows and time.monotonic() - self._oldest >= self.flush_s
        if len(self._rows) >= self.rows_per_chunk or due:
            self.flush()

    def flush(self) -> None:
        """Write the rows held as one row group. A failure (disk full, a path that cannot be
        created) drops them, counted in ``lost`` and logged, and the next flush tries again:
        the rows never pile up and the caller (the decision tick) never sees the error."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        try:
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._writer = pq.ParquetWriter(self.path, SCHEMA)
            self._writer.write_table(table, row_group_size=max(len(rows), 1))
        except (OSError, pa.ArrowException) as err:
            self.lost += len(rows)
            if str(err) != self.last_error:  # once per distinct error, not once per tick
                log.warning("decision log %s: %d rows lost: %s", self.path, len(rows), err)
            self.last_error = str(err)
            return
        self.written += len(rows)
        self.chunks += 1

    def close(self) -> None:
        self.flush()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except (OSError, pa.ArrowException) as err:
                log.warning("decision log %s: closing failed: %s", self.path, err)
