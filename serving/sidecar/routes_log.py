"""The routes log: every request the router routed, one Parquet row each, written beside the
decision log (shadow and active mode alike) so that ``kvcast shadow-eval --routes`` can tell
which node each request went to.

The HTTP handler only appends the request's row to a list (:meth:`RoutesLog.note`, a lock and
an append: the request path never waits on the disk); the decision loop's thread writes it,
as it writes the decision log, on its next tick. It is a :class:`~.parquet_parts.PartedLog`
with the decision log's settings: the same row groups, parts, crash safety and run names.

Names: the run whose decision log is ``<stem>.parquet`` (``decisions.parquet``,
``decisions.1.parquet``, ...) writes ``<stem>.routes.parquet`` (``decisions.routes.parquet``,
its parts ``decisions.routes.part-0002.parquet``, ...). ``kvcast shadow-eval --routes`` given
the first part reads all its parts, given the directory every run's.

Columns (times are unix milliseconds):

=================  ==============  ============================================================
``ts_ms``          float64         when the request was routed (the router's time, else the
                                   sidecar's at receipt)
``request_id``     string          the router's request id (a repeated one is logged once)
``node``           int32           node id: the decision log's ``source`` / ``target`` ids
``node_name``      string          its name
``tenant``         string          the request's tenant
``session``        string          its session (null: none given)
``input_tokens``   int64           prompt tokens
``output_tokens``  int64           output tokens
``blocks``         int32           block hashes the request listed
=================  ==============  ============================================================
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvcast.features.events import RequestArrived
from kvcast.serving.sidecar.parquet_parts import PartedLog

SCHEMA = pa.schema(
    [("ts_ms", pa.float64()), ("request_id", pa.string()), ("node", pa.int32()),
     ("node_name", pa.string()), ("tenant", pa.string()), ("session", pa.string()),
     ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("blocks", pa.int32())]
)  # fmt: skip
ROUTES = ".routes"  # <stem>.parquet's routes are <stem>.routes.parquet
MAX_PENDING = 1_000_000  # rows noted but not yet taken by a tick (beyond: dropped, lost)


def routes_path(decisions: Path) -> Path:
    """The routes log of the run whose decision log is ``decisions`` (its first part)."""
    return decisions.with_name(f"{decisions.stem}{ROUTES}{decisions.suffix}")


class RoutesLog(PartedLog):
    SCHEMA = SCHEMA
    LABEL = "routes log"
    KEY = "decision_log"

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # PartedLog's
        super().__init__(*args, **kwargs)
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.dropped = 0  # rows noted beyond MAX_PENDING, never written

    def note(self, events: Iterable[RequestArrived]) -> None:
        """Keep the routed requests for the next write (any thread; never touches the disk).
        Beyond ``MAX_PENDING`` rows not yet taken, the new ones are dropped and counted in
        ``dropped``."""
        rows = [
            {"ts_ms": e.ts_ms, "request_id": e.request_id, "node": e.node,
             "node_name": self.names[e.node] if 0 <= e.node < len(self.names) else "",
             "tenant": e.tenant, "session": e.session, "input_tokens": e.input_tokens,
             "output_tokens": e.output_tokens, "blocks": len(e.block_hashes)}
            for e in events
        ]  # fmt: skip
        with self._lock:
            room = max(MAX_PENDING - len(self._pending), 0)
            self._pending.extend(rows[:room])
            self.dropped += len(rows) - min(room, len(rows))

    def maybe_flush(self) -> None:
        """Take the rows noted since the last call, then write what is due (the writer's
        thread: the decision loop's tick, or ``close``)."""
        with self._lock:
            rows, self._pending = self._pending, []
        if rows:
            self.hold(rows)  # calls maybe_flush again, with nothing pending
        else:
            super().maybe_flush()

    def close(self) -> None:
        with self._lock:
            rows, self._pending = self._pending, []
        self._rows.extend(rows)
        super().close()
