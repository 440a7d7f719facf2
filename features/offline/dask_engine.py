"""The feature pipeline on a Dask cluster: one task per time window of ticks.

The client ingests the stream once, computes the carried long-memory state
(:mod:`kvcast.features.offline.carry`, per access and per request: light columns) and ships each
window its slice (:mod:`kvcast.features.offline.windowed`); the workers build the rows, the
memory-heavy part. At most ``2 x workers`` windows are in flight, so neither side holds more
than a few windows of rows. Rows and features equal the pandas path's
(:func:`kvcast.features.offline.pipeline.build_feature_dataset`); the rows come grouped by
window, then by block and tick (sort by ``block, tick_ms`` for the pandas order).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig, TickConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.dask_client import worker_addresses
from kvcast.features.events import Event
from kvcast.features.offline.candidates import table_and_ticks
from kvcast.features.offline.carry import carried_state
from kvcast.features.offline.partitions import Residency, plan_windows
from kvcast.features.offline.residency import Changes, changes, flag_deltas
from kvcast.features.offline.table import EventTable
from kvcast.features.offline.telemetry import node_table
from kvcast.features.offline.windowed import WindowInput, window_input, window_rows
from kvcast.features.spec import build_spec

DEFAULT_WINDOW_MS = 1_800_000.0  # ticks per task: 30 minutes


def stream_counters(
    table: EventTable, cfg: FeatureConfig, ch: Changes | None = None
) -> dict[str, int]:
    """The bad-input counters of the whole stream, as the pandas path reports them; ``ch``:
    the table's :func:`changes` when already made."""
    bad = BadInputCounters()
    bad.counts.update(table.bad.counts)
    ch = ch if ch is not None else changes(table, np.unique(table.s_hash))[0]
    flag_deltas(ch, cfg.nodes, bad)
    node_table(table.telemetry, np.zeros(0), cfg, bad)
    return bad.as_dict()


def _plan(
    events: Iterable[Event] | EventTable,
    ticks: np.ndarray | TickConfig | None,
    cfg: FeatureConfig | None,
    window_ms: float,
) -> tuple[FeatureConfig, EventTable, dict[str, int], Iterator[WindowInput]]:
    """The config, the event table, the stream's bad-input counters and the windows' inputs
    (made lazily, one at a time)."""
    cfg, table, ticks = table_and_ticks(events, ticks, cfg)
    windows = plan_windows(ticks, window_ms, cfg)
    uniq = np.unique(table.s_hash)
    ch = changes(table, uniq)[0]
    res, carry = Residency.of_changes(ch, uniq), carried_state(table, cfg)
    bad = stream_counters(table, cfg, ch)
    return cfg, table, bad, (window_input(table, res, carry, w) for w in windows)


def _run(client: Any, inputs: Iterator[WindowInput], task: Callable, *args: Any) -> list:
    """``task(input, *args)`` for every input on the cluster, a bounded number in flight;
    results in window order."""
    from distributed import as_completed

    limit = 2 * max(len(worker_addresses(client)), 1)
    run = uuid.uuid4().hex  # keys of this run only: a shared scheduler hands back any task
    index: dict[str, int] = {}  # that holds the same key (another job's "window-0")
    results: dict[int, Any] = {}
    pending = as_completed()
    for w in inputs:
        data = client.scatter(w, hash=False)  # straight to a worker, not through the scheduler
        key = f"window-{run}-{w.window.index}"
        index[key] = w.window.index
        pending.add(client.submit(task, data, *args, pure=False, key=key))
        while pending.count() >= limit:
            fut = next(pending)
            results[index[fut.key]] = fut.result()
    for fut in pending:
        results[index[fut.key]] = fut.result()
    return [results[k] for k in sorted(results)]


def build_feature_dataset_dask(
    events: Iterable[Event] | EventTable,
    ticks: np.ndarray | TickConfig | None = None,
    cfg: FeatureConfig | None = None,
    *,
    client: Any,
    window_ms: float = DEFAULT_WINDOW_MS,
) -> pd.DataFrame:
    """:func:`build_feature_dataset` on ``client``'s cluster, gathered into one frame (for
    data that fits the client; :func:`write_feature_parts` keeps the rows on the workers)."""
    cfg, table, bad, inputs = _plan(events, ticks, cfg, window_ms)
    parts = _run(client, inputs, window_rows, cfg)
    spec = build_spec(cfg)
    df = pd.concat(parts, ignore_index=True) if parts else _empty(cfg)
    df.attrs["bad_input"] = bad
    df.attrs["block_events"] = table.block_events
    df.attrs["spec_digest"] = spec.digest
    return df


def _empty(cfg: FeatureConfig) -> pd.DataFrame:
    from kvcast.features.offline.pipeline import build_feature_dataset

    return build_feature_dataset([], np.zeros(0), cfg)


def _write_part(w: WindowInput, cfg: FeatureConfig, out_dir: str) -> dict[str, Any]:
    """Build one window on a worker, write it as ``part-NNNNN.parquet``, return its stats."""
    df = window_rows(w, cfg)
    names = list(build_spec(cfg).names)
    path = Path(out_dir) / f"part-{w.window.index:05d}.parquet"
    df.to_parquet(path, index=False)
    pos = df["label_burst"].to_numpy() > 0
    weight = df["weight"].to_numpy()
    return {
        "path": str(path),
        "rows": len(df),
        "positives": int(pos.sum()),
        "weight": float(weight.sum()),
        "weight_pos": float((weight * pos).sum()),
        "nulls": df[names].isna().sum().to_dict(),
    }


def write_feature_parts(
    events: Iterable[Event] | EventTable,
    out_dir: str | Path,
    ticks: np.ndarray | TickConfig | None = None,
    cfg: FeatureConfig | None = None,
    *,
    client: Any,
    window_ms: float = DEFAULT_WINDOW_MS,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write the dataset as one Parquet file per window under ``out_dir`` (written by the
    workers: a remote cluster needs ``out_dir`` on a shared file system). Returns the parts'
    stats and the whole dataset's summary (the keys of :func:`kvcast.features.summarise`)."""
    cfg, _, bad, inputs = _plan(events, ticks, cfg, window_ms)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    parts = _run(client, inputs, _write_part, cfg, str(Path(out_dir).resolve()))
    names = build_spec(cfg).names
    rows = sum(p["rows"] for p in parts)
    positives = sum(p["positives"] for p in parts)
    weight = sum(p["weight"] for p in parts)
    summary = {
        "rows": rows,
        "positives": positives,
        "positives_rate": positives / rows if rows else 0.0,
        "positives_rate_weighted": sum(p["weight_pos"] for p in parts) / weight if rows else None,
        "null_rate": {n: sum(p["nulls"][n] for p in parts) / rows if rows else 0.0 for n in names},
        "bad_input": bad,
    }
    return parts, summary
