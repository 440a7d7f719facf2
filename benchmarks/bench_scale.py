"""Feature pipeline scale-out: pandas vs Dask (1 and 2 workers) on 1x, 2x, ... traces.

Each scale is a synthesised trace (``kvcast trace synth``: the dev conversation trace's
sessions replayed N times with fresh block ids), replayed once by the simulator; then the
same event table goes to the pandas path (``build_feature_dataset`` + ``features.parquet``,
in a fresh process: the same-run baseline) and to the Dask path
(``write_feature_parts``: one task per window of ticks, each worker writes its part) on a fresh
``LocalCluster`` of 1 and of 2 single-threaded worker processes. Reported per run: rows,
wall seconds, rows/s, and peak resident memory per process doing the feature work (the
pandas process, each Dask worker; ``ru_maxrss``), with the idle size of such a process
(imports only) beside it. The Dask workers' peak should stay flat as the trace grows: a
worker holds one window of events and rows at a time.

    python benchmarks/bench_scale.py [--trace PATH] [--scales 1,2,4,10] [--window-ms 1800000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

DEV_TRACE = Path("/work/shared/traces/mooncake_conversation_dev.jsonl")


def peak_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``,
    which a spawned process inherits from its parent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _pandas_child(table: Any, cfg: Any, out: str, queue: Any) -> None:
    from kvcast.features import build_feature_dataset, build_spec, write_feature_dataset

    idle = peak_mb()
    t0 = time.perf_counter()
    df = build_feature_dataset(table, None, cfg)
    write_feature_dataset(df, out, build_spec(cfg), "bench", cfg.digest())
    queue.put({"rows": len(df), "seconds": time.perf_counter() - t0, "peak_mb": peak_mb(),
               "idle_mb": idle})  # fmt: skip


def run_pandas(table: Any, cfg: Any) -> dict[str, Any]:
    """In a fresh process, so that its peak memory is this run's alone."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as out:
        proc = ctx.Process(target=_pandas_child, args=(table, cfg, out, queue))
        proc.start()
        res = queue.get()
        proc.join()
    return res


def run_dask(table: Any, cfg: Any, workers: int, window_ms: float) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from kvcast.features.offline.dask_engine import write_feature_parts

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
        tempfile.TemporaryDirectory() as out,
    ):
        client.run(lambda: __import__("kvcast.features.offline.windowed"))
        idle = client.run(peak_mb)
        t0 = time.perf_counter()
        parts, summary = write_feature_parts(table, out, None, cfg, client=client,
                                             window_ms=window_ms)  # fmt: skip
        seconds = time.perf_counter() - t0
        peaks = client.run(peak_mb)
    return {
        "rows": summary["rows"],
        "seconds": seconds,
        "windows": len(parts),
        "peak_mb_per_worker": sorted(round(v, 1) for v in peaks.values()),
        "idle_mb_per_worker": sorted(round(v, 1) for v in idle.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEV_TRACE)
    ap.add_argument("--scales", default="1,2,4,10")
    ap.add_argument("--window-ms", type=float, default=1_800_000.0)
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args()

    from kvcast.features.config import FeatureConfig
    from kvcast.features.offline.ingest import event_table
    from kvcast.features.traces import Trace, load_trace
    from kvcast.features.traces.synthesize import synthesize
    from kvcast.features.traces.table import make_table
    from kvcast.simulator.config import SimConfig
    from kvcast.simulator.recording import feature_config_for, record_events

    src = load_trace(args.trace)
    sim = SimConfig()
    results = []
    for scale in (int(s) for s in args.scales.split(",")):
        t0 = time.perf_counter()
        reqs = synthesize(src.requests, scale, seed=0)  # sessions left implicit, as in the source
        table_in = make_table(
            arrival_ms=reqs["arrival_ms"].to_numpy(),
            input_tokens=reqs["input_tokens"].to_numpy(),
            output_tokens=reqs["output_tokens"].to_numpy(),
            block_hashes=list(reqs["block_hashes"]),
        )
        trace = Trace(table_in, f"{args.trace.stem}x{scale}", src.block_size)
        cfg = feature_config_for(sim, trace, FeatureConfig())
        table = event_table(record_events(trace, sim), cfg)
        prep = time.perf_counter() - t0
        row: dict[str, Any] = {
            "scale": scale,
            "requests": len(reqs),
            "trace_minutes": round((reqs["arrival_ms"].max() - reqs["arrival_ms"].min()) / 6e4),
            "block_events": table.block_events,
            "replay_seconds": round(prep, 2),
        }
        base = run_pandas(table, cfg)
        row["pandas"] = base | {"rows_per_s": round(base["rows"] / base["seconds"])}
        for w in (int(x) for x in args.workers.split(",")):
            d = run_dask(table, cfg, w, args.window_ms)
            assert d["rows"] == base["rows"], (d["rows"], base["rows"])
            row[f"dask_{w}w"] = d | {
                "rows_per_s": round(d["rows"] / d["seconds"]),
                "speed_vs_pandas": round(base["seconds"] / d["seconds"], 2),
            }
        results.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "scale", "window_ms": args.window_ms, "results": results}))


if __name__ == "__main__":
    main()
