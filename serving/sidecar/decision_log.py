"""The decision log: every decision the sidecar makes, one Parquet row each (shadow mode's
record, and active mode's too).

The log is a :class:`~.parquet_parts.PartedLog`: written in row groups (one per
``rows_per_chunk`` decisions, or sooner when the oldest unwritten row is ``flush_s`` old) and
in parts: a part is closed, its footer written,
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

import math
from typing import Any

import pyarrow as pa

from kvcast.serving.sidecar.decisions import Decision
from kvcast.serving.sidecar.parquet_parts import (  # noqa: F401 (the log's names, re-exported)
    PART,
    ROTATE_ROWS,
    ROTATE_S,
    PartedLog,
    free_path,
    part_path,
)

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


class DecisionLog(PartedLog):
    """The decision log of one run: ``path`` names it (its first part, or the free name beside
    it that :func:`free_path` picks); ``parts`` lists the parts closed so far, readable as they
    are."""

    SCHEMA = SCHEMA
    LABEL = "decision log"
    KEY = "decision_log"

    def add(self, decisions: list[Decision]) -> None:
        self.hold([row(d, self.names) for d in decisions])
