"""Load on a real ``kvcast serve sidecar`` process: 10x the conversation trace's peak event rate
over loopback for ``--duration`` seconds, then it stops by itself; prints one JSON object.

The rate: the trace's busiest second (requests arriving within one second of each other),
times 3 events per request, as a router and a vLLM engine send them for one request: the
arrival (``POST /v1/requests``), the ``BlockStored`` of its blocks and the ``BlockRemoved`` of
as many older ones (a full cache evicts what it stores) over ZMQ, in vLLM's wire format, one
publisher per node, each batch carrying the trace's own block counts. Requests cycle through
the trace; every cycle gets new hashes (new conversations), so the sidecar keeps seeing new
blocks, as in production, and its memory must stay bounded by its own limits.

Measured throughout: ``/healthz`` latency (probed every 50 ms; goal: every answer within
100 ms), the process's RSS (sampled every second), events sent / ingested / applied / dropped
(the sidecar's own counters, queue-full drops and ZMQ sequence gaps), and the decision ticks
(their rate against the configured ``tick_ms``, their duration from the tick histogram), and
the pauses of Python's cyclic GC in the sidecar by generation and kind (``--no-gc-pacing``
leaves its full collections to CPython's schedule: ``gc.paced: false``). Same-run baseline:
the same probes on the same sidecar, idle, for ``--idle`` seconds before the load starts.

    python benchmarks/load_sidecar.py [--duration 60] [--factor 10] [--trace PATH]
                                      [--model PATH] [--nodes 4] [--idle 5]
                                      [--max-tracked-blocks N] [--max-tracked-sessions N]
                                      [--no-gc-pacing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import yaml
from trace_load import DEV_TRACE, Load, peak_rate

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.cluster.summary import parse_metrics
from kvcast.serving.kv_events import KvEventPublisher

EVENTS_PER_REQUEST = 3  # arrival, BlockStored, BlockRemoved
PACE_S, PROBE_S, SAMPLE_S = 0.02, 0.05, 1.0
HEALTHZ_GOAL_MS = 100.0
READY = re.compile(r"sidecar (\S+) ready: http=http://(\S+) ")
S = "kvcast_sidecar_"
# the tick's parts (features on the consumer thread), and the log writes after each tick
PARTS = ("features", "scoring", "decide", "log_write")


def default_model(workdir: Path) -> str:
    """The trained recency model when there is one, else bench_sidecar's logistic model."""
    from kvcast.serving.cluster.model_choice import recency_model_path

    path = recency_model_path()
    if path.is_file():
        return str(path)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_sidecar import logistic_model

    return str(logistic_model(workdir / "model.onnx", build_spec(FeatureConfig())))


def total(m: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in m.items() if k == prefix or k.startswith(prefix + "{"))


def hist_quantile(m: dict[str, float], name: str, q: float, labels: str = "") -> float | None:
    """The ``q`` quantile of a Prometheus histogram (linear within its bucket), seconds;
    ``labels``: its series' other labels, as ``parse_metrics`` keys them
    (``"generation=2,kind=auto,"``)."""
    buckets = sorted(
        (float(k.split("le=")[1].rstrip("}")), v) for k, v in m.items()
        if k.startswith(f"{name}_bucket{{{labels}le=")
    )  # fmt: skip
    if not buckets or buckets[-1][1] == 0:
        return None
    rank, lo, below = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lo
            return lo + (le - lo) * (rank - below) / max(count - below, 1e-12)
        lo, below = le, count
    return lo


def gc_pauses(window: dict[str, float], prefix: str = S) -> dict[str, dict[str, float | None]]:
    """Per generation and kind (``2/paced`` ...): collections, their p99 and the upper bound
    of the slowest one's bucket, ms (None: beyond the last bucket); ``prefix``: the process's
    metric prefix (an agent's: ``kvcast_agent_``)."""
    out: dict[str, dict[str, float | None]] = {}
    for gen, kind in (("0", "auto"), ("1", "auto"), ("2", "auto"), ("2", "paced"), ("2", "thaw")):
        labels = f"generation={gen},kind={kind},"
        bucket = f"{prefix}gc_pause_seconds_bucket{{{labels}le="
        buckets = sorted((float(k[len(bucket):-1]), v) for k, v in window.items()
                         if k.startswith(bucket))  # fmt: skip
        count = buckets[-1][1] if buckets else 0.0
        slowest = next((le for le, c in buckets if c >= count), None) if count else None
        p99 = hist_quantile(window, f"{prefix}gc_pause_seconds", 0.99, labels)
        out[f"{gen}/{kind}"] = {
            "count": count, "p99_ms": None if p99 is None else round(p99 * 1e3, 3),
            "slowest_under_ms": None if slowest is None or math.isinf(slowest) else slowest * 1e3,
        }  # fmt: skip
    return out


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


async def probe(http: httpx.AsyncClient, until: float, out: list[float]) -> None:
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            r = await http.get("/healthz", timeout=5.0)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append((time.perf_counter() - t0) * 1000.0 if ok else float("inf"))
        await asyncio.sleep(PROBE_S)


Scrape = tuple[float, dict[str, float]]


async def sample(
    http: httpx.AsyncClient, proc: psutil.Process, until: float, rss: list[float],
    scrapes: list[Scrape],
) -> None:  # fmt: skip
    while time.monotonic() < until:
        rss.append(proc.memory_info().rss / 2**20)
        r = await http.get("/metrics", timeout=5.0)
        scrapes.append((time.monotonic(), parse_metrics(r.text)))
        await asyncio.sleep(SAMPLE_S)


async def drive(http: httpx.AsyncClient, load: Load, duration_s: float) -> float:
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < duration_s:
        arrivals = load.emit(load.due(elapsed), time.time() * 1000.0)
        if arrivals:
            try:
                r = await http.post("/v1/requests", json={"requests": arrivals}, timeout=5.0)
                body = r.json() if r.status_code == 202 else {}
                load.http_accepted += body.get("accepted", 0)
                load.http_dropped += body.get("dropped", 0)
                load.http_failures += r.status_code != 202
            except httpx.HTTPError:
                load.http_failures += 1
        await asyncio.sleep(max(0.0, PACE_S - (time.monotonic() - start - elapsed)))
    return time.monotonic() - start


async def measure(base: str, pid: int, load: Load, args: argparse.Namespace,
                  tick_ms: float) -> dict[str, Any]:  # fmt: skip
    proc = psutil.Process(pid)
    async with httpx.AsyncClient(base_url=base) as http, httpx.AsyncClient(base_url=base) as hz:
        idle_lat: list[float] = []
        idle_rss: list[float] = []
        idle_scrapes: list[Scrape] = []
        end = time.monotonic() + args.idle
        await asyncio.gather(probe(hz, end, idle_lat), sample(http, proc, end, idle_rss,
                                                               idle_scrapes))  # fmt: skip
        lat: list[float] = []
        rss: list[float] = []
        scrapes: list[Scrape] = []
        end = time.monotonic() + args.duration
        _, _, elapsed = await asyncio.gather(
            probe(hz, end, lat), sample(http, proc, end, rss, scrapes),
            drive(http, load, args.duration),
        )  # fmt: skip
        for pub in load.pubs:
            pub.flush(5.0)
        t_end = time.monotonic() + 10.0  # let the queue drain
        while True:
            m = parse_metrics((await http.get("/metrics")).text)
            if m[f"{S}queue_events"] == 0 or time.monotonic() > t_end:
                break
            await asyncio.sleep(0.1)
        rss_end = proc.memory_info().rss / 2**20

    t_first, m_first = scrapes[0] if scrapes else idle_scrapes[-1]
    t_last, m_last = scrapes[-1]
    ticks = m_last[f"{S}ticks_total"] - m_first[f"{S}ticks_total"]
    span = max(t_last - t_first, 1e-9)
    half = len(rss) // 2
    tail = rss[half:]
    slope = float(np.polyfit(np.arange(len(tail)) * SAMPLE_S, tail, 1)[0]) if len(tail) > 2 else 0.0
    loaded = window(m_first, m_last)  # the ticks of the load window only

    def quantile_ms(part: str, q: float) -> float | None:
        x = hist_quantile(loaded, f"{S}{part}_seconds", q)
        return None if x is None else round(x * 1000.0, 3)

    sent = load.sent_zmq_events + load.sent_requests
    return {
        "rss_slope_second_half_mb_per_min": round(slope * 60.0, 2),
        "duration_s": round(elapsed, 2),
        "events_sent": sent,
        "events_sent_per_s": round(sent / elapsed, 1),
        "kv_event_hashes_sent_per_s": round(load.sent_hashes / elapsed, 1),
        "requests_sent": load.sent_requests,
        "events_ingested": int(total(m, f"{S}events_in_total")),
        "events_applied": int(m[f"{S}events_applied_total"]),
        "events_dropped_queue_full": int(total(m, f"{S}events_dropped_total")),
        "zmq_batches_missed": int(total(m, f"{S}kv_missed_batches_total")),
        "http_arrivals_dropped": load.http_dropped,
        "http_failures": load.http_failures,
        "queue_peak_events": int(m[f"{S}queue_peak_events"]),
        "tracked_blocks_end": int(m[f"{S}tracked_blocks"]),
        "shed_blocks": int(m[f"{S}shed_blocks_total"]),
        "tracked_sessions_end": int(m[f"{S}tracked_sessions"]),
        "shed_sessions": int(m[f"{S}shed_sessions_total"]),
        "queue_capacity_events": int(m[f"{S}queue_capacity_events"]),
        "healthz_ms": {
            "p50": pct(lat, 50),
            "p99": pct(lat, 99),
            "max": max(lat) if lat else None,
            "over_100ms": sum(x > HEALTHZ_GOAL_MS for x in lat),
            "probes": len(lat),
        },
        "rss_mb": {
            "start": rss[0] if rss else None,
            "peak": max([*rss, rss_end]),
            "end": rss_end,
            "first_half_peak": max(rss[:half]) if half else None,
            "second_half_peak": max(rss[half:]) if rss[half:] else None,
        },
        "ticks": {
            "configured_ms": tick_ms,
            "count": int(ticks),
            "mean_period_ms": round(span * 1000.0 / ticks, 1) if ticks else None,
            "tick_p50_ms": quantile_ms("tick", 0.5),
            "tick_p99_ms": quantile_ms("tick", 0.99),
            # (wall time, from the sidecar's histograms: since 2026-12-05 the tick excludes the
            # log writes that follow it, timed apart as log_write)
            "parts_p50_ms": {k: quantile_ms(k, 0.5) for k in PARTS},
            "parts_p99_ms": {k: quantile_ms(k, 0.99) for k in PARTS},
            "errors": int(m[f"{S}tick_errors_total"]),
        },
        # Python's cyclic GC in the sidecar over the load, per generation (2: full)
        "gc_pauses": gc_pauses(loaded),
        "baseline_idle": {
            "seconds": args.idle,
            "healthz_ms": {
                "p50": pct(idle_lat, 50),
                "p99": pct(idle_lat, 99),
                "max": max(idle_lat) if idle_lat else None,
            },
            "rss_mb": max(idle_rss) if idle_rss else None,
        },
    }


def start_kvcast(
    args: list[str], env: dict[str, str], ready: re.Pattern[str], timeout_s: float = 60.0
) -> tuple[subprocess.Popen[str], re.Match[str]]:
    """``kvcast ARGS`` as a process, once its log says ``ready`` (its match); its output is
    read on from a thread, so that it never blocks on a full pipe."""
    script = Path(sys.executable).with_name("kvcast")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "kvcast.cli.app"]
    proc = subprocess.Popen([*cmd, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    out = proc.stdout
    assert out is not None
    deadline, line = time.monotonic() + timeout_s, ""
    for line in out:
        if match := ready.search(line):
            threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
            return proc, match
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit(f"kvcast {' '.join(args[:2])} did not start: {line}")


def start_sidecar(cfg: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc, match = start_kvcast(["serve", "sidecar", "--config", cfg], env, READY)
    return proc, f"http://{match.group(2)}"


def window(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each series' count over a window: at its end less at its start."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--factor", type=float, default=10.0, help="times the trace's peak rate")
    ap.add_argument("--trace", default=None, help="conversation trace (default: dev, else bundled)")
    ap.add_argument("--model", default=None, help="ONNX model (default: recency, else logistic)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of idle baseline")
    ap.add_argument("--tick-ms", type=float, default=250.0)
    ap.add_argument(
        "--no-gc-pacing",
        action="store_true",
        help="leave the sidecar's full GC collections to CPython (gc.paced: false)",
    )
    ap.add_argument(
        "--max-tracked-blocks", type=int, default=None,
        help="the sidecar's feature-state cap on blocks (default: the sidecar's own)",
    )  # fmt: skip
    ap.add_argument(
        "--max-tracked-sessions", type=int, default=None,
        help="the sidecar's feature-state cap on sessions (default: the sidecar's own)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.duration <= 0 or args.factor <= 0 or args.nodes < 1 or args.idle <= 0:
        raise SystemExit("--duration, --factor, --idle must be > 0 and --nodes >= 1")

    from kvcast.cli.common import open_trace

    spec = args.trace or (str(DEV_TRACE) if DEV_TRACE.is_file() else "bundled:conversation")
    trace = open_trace(spec)
    peak_req, mean_req = peak_rate(trace)
    target_req = args.factor * peak_req
    with tempfile.TemporaryDirectory(prefix="kvcast-load-") as tmp:
        work = Path(tmp)
        model = args.model or default_model(work)
        pubs = [KvEventPublisher("tcp://127.0.0.1:*") for _ in range(args.nodes)]
        try:
            nodes = [{"name": f"n{i}", "engine": p.endpoint} for i, p in enumerate(pubs)]
            cfg = work / "sidecar.yaml"
            cfg.write_text(yaml.safe_dump({
                "listen": "127.0.0.1:0", "mode": "shadow", "model": model, "nodes": nodes,
                "tick_ms": args.tick_ms, "decision_log": {"path": str(work / "decisions.parquet")},
                **({} if args.max_tracked_blocks is None
                   else {"max_tracked_blocks": args.max_tracked_blocks}),
                **({} if args.max_tracked_sessions is None
                   else {"max_tracked_sessions": args.max_tracked_sessions}),
                "gc": {"paced": not args.no_gc_pacing},
            }))  # fmt: skip
            env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
            proc, base = start_sidecar(str(cfg), env)
            try:
                joined = time.monotonic() + 10.0
                while time.monotonic() < joined:  # ZMQ's slow joiner: probe every publisher
                    for p in pubs:
                        p.publish_events([], ts_ms=time.time() * 1000.0)
                    m = parse_metrics(httpx.get(f"{base}/metrics").text)
                    if all(m.get(f"{S}kv_received_total{{node=n{i}}}", 0) > 0
                           for i in range(args.nodes)):  # fmt: skip
                        break
                    time.sleep(0.05)
                load = Load(trace, pubs, target_req)
                result = asyncio.run(measure(base, proc.pid, load, args, args.tick_ms))
            finally:
                proc.send_signal(signal.SIGTERM)
                exit_status = proc.wait(timeout=30)
        finally:
            for p in pubs:
                p.close()
    lat, ticks = result["healthz_ms"], result["ticks"]
    out = {
        "trace": spec,
        "trace_peak_requests_per_s": peak_req,
        "trace_mean_requests_per_s": round(mean_req, 2),
        "events_per_request": EVENTS_PER_REQUEST,
        "trace_peak_events_per_s": peak_req * EVENTS_PER_REQUEST,
        "factor": args.factor,
        "target_events_per_s": target_req * EVENTS_PER_REQUEST,
        "nodes": args.nodes,
        "model": model if args.model or "kvcast-load-" not in model else "bench_sidecar logistic",
        **result,
        "sidecar_exit_status": exit_status,
        "goals": {
            "healthz_within_100ms": lat["over_100ms"] == 0,
            "ingestion_kept_up_or_counted": result["events_applied"]
            + result["events_dropped_queue_full"]
            >= result["events_ingested"],
            "rss_plateaued": abs(result["rss_slope_second_half_mb_per_min"]) < 1.0,
            "decisions_kept_their_tick": ticks["mean_period_ms"] is not None
            and ticks["mean_period_ms"] <= 1.1 * args.tick_ms,
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
