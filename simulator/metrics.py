"""What a run measured: per-request records, the telemetry timeline, and the summary whose
key names are a contract (DESIGN.md section 5)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kvcast.features.events import TelemetrySample

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator


class RequestLog:
    """Preallocated per-request columns, filled in as requests progress."""

    FLOAT = ("arrival", "ready", "prefill_start", "first_token", "finish", "tpot_ms", "slo_ms")
    INT = ("node", "cached_blocks", "lower_tier_blocks", "transferred_blocks", "recomputed_tokens")

    def __init__(self, n: int) -> None:
        for name in self.FLOAT:
            setattr(self, name, np.full(n, np.nan))
        for name in self.INT:
            setattr(self, name, np.zeros(n, dtype=np.int64))
        self.rejected = np.zeros(n, dtype=bool)


class Timeline:
    """Node telemetry sampled every ``telemetry_period_ms``, kept as compact columns."""

    # the frame's columns; the sample's fields are the same but for its time (ts_ms)
    COLUMNS = (
        "t_s",
        "node",
        "queue_len",
        "queued_prefill_tokens",
        "running_decodes",
        "active_tokens",
        "used_bytes",
        "cached_bytes",
        "speculative_bytes",
        "evictions_total",
        "est_queue_ms",
    )
    FIELDS = ("ts_ms", *COLUMNS[1:])

    def __init__(self) -> None:
        self._cols = [array("d") for _ in self.COLUMNS]

    def add(self, s: TelemetrySample) -> None:
        for col, name in zip(self._cols, self.FIELDS, strict=True):
            col.append(getattr(s, name))

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(
            {
                c: np.frombuffer(col, dtype=np.float64) if len(col) else []
                for c, col in zip(self.COLUMNS, self._cols, strict=True)
            }
        )
        df["t_s"] = df["t_s"] / 1e3
        ints = [c for c in self.COLUMNS if c not in ("t_s", "est_queue_ms")]
        return df.astype({c: np.int64 for c in ints})


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


@dataclass
class SimResult:
    requests: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]

    @classmethod
    def build(cls, sim: Simulator, wall_s: float) -> SimResult:
        log = sim.log
        served = ~log.rejected & ~np.isnan(log.first_token)
        ttft = log.first_token - log.arrival
        queue = log.prefill_start - log.ready
        transfer = log.ready - log.arrival
        slo_ok = served & (ttft <= log.slo_ms)
        tr = sim.trace.requests
        nblocks = tr["block_hashes"].map(len).to_numpy()
        df = pd.DataFrame(
            {
                "request_id": tr["request_id"].astype(str).to_numpy(),
                "node": log.node,
                "arrival_ms": log.arrival,
                "ready_ms": log.ready,
                "prefill_start_ms": log.prefill_start,
                "first_token_ms": log.first_token,
                "finish_ms": log.finish,
                "ttft_ms": ttft,
                "queue_ms": queue,
                "transfer_ms": transfer,
                "tpot_ms": log.tpot_ms,
                "input_tokens": tr["input_tokens"].to_numpy(),
                "output_tokens": tr["output_tokens"].to_numpy(),
                "blocks": nblocks,
                "cached_blocks": log.cached_blocks,
                "lower_tier_blocks": log.lower_tier_blocks,
                "transferred_blocks": log.transferred_blocks,
                "recomputed_tokens": log.recomputed_tokens,
                "slo_ms": log.slo_ms,
                "slo_ok": slo_ok,
                "rejected": log.rejected,
            }
        )
        summary = summarise(sim, df, wall_s)
        return cls(df, sim.timeline.frame(), summary)


def summarise(sim: Simulator, df: pd.DataFrame, wall_s: float) -> dict[str, Any]:
    served = df[~df["rejected"]]
    ttft = served["ttft_ms"].to_numpy()
    tpot = served.loc[served["output_tokens"] > 0, "tpot_ms"].to_numpy()
    n = len(df)
    # goodput's window: from the first arrival to the last event the SLO judges (a first
    # token, or an arrival after the last of them): on a trace of a few requests in one
    # burst, the arrivals' span alone is milliseconds (75 rps for 3 requests)
    first_tokens = served["first_token_ms"].to_numpy(dtype=float)
    end = max(df["arrival_ms"].max(), np.nanmax(first_tokens, initial=-np.inf)) if n else 0.0
    dur_s = (end - df["arrival_ms"].min()) / 1e3 if n else 0.0
    bb = sim.block_bytes
    pools = [node.pool for node in sim.nodes]
    hits = sum(p.spec_hits for p in pools)
    wasted = sum(p.spec_wasted for p in pools)
    placed = sim._placed
    total_blocks = int(served["blocks"].sum())  # of the requests served (a rejected one
    reused = int((served["cached_blocks"] + served["lower_tier_blocks"]).sum())  # reads none)
    return {
        "policy": sim.policy.name,
        "trace": sim.trace.name,
        "time_scale": sim.time_scale,
        "load_scaling": sim.cfg.load_scaling,  # how time_scale raised the load
        "nodes": sim.cfg.nodes,
        "requests": n,
        "rejected": int(df["rejected"].sum()),
        "ttft_ms": {
            "p50": _pct(ttft, 50),
            "p95": _pct(ttft, 95),
            "p99": _pct(ttft, 99),
            "mean": float(ttft.mean()) if len(ttft) else float("nan"),
        },
        "tpot_ms": {"p50": _pct(tpot, 50), "p99": _pct(tpot, 99)},
        "queue_ms": {"p99": _pct(served["queue_ms"].to_numpy(), 99)},
        "slo": sim.cfg.slo.as_summary(),
        "slo_attainment": float(df["slo_ok"].mean()) if n else float("nan"),
        "goodput_rps": float(df["slo_ok"].sum() / dur_s) if dur_s > 0 else float("nan"),
        "prefix_hit_ratio": reused / total_blocks if total_blocks else float("nan"),
        "recomputed_tokens": int(served["recomputed_tokens"].sum()),
        "bytes_pulled": int(sim.replication["bytes_pulled"]),
        "bytes_replicated": placed * bb,
        "bytes_replicated_used": hits * bb,
        "bytes_wasted": wasted * bb,
        "replications": int(sim.replication["replications"]),
        # undefined without a copy placed (a plain router) or used: null, not 0 (a hit rate
        # of none, a lead of 0 s)
        "replication_hit_rate": hits / placed if placed else None,
        "mean_lead_time_ms": (sum(p.spec_lead_ms for p in pools) / hits) if hits else None,
        "active_evictions_by_speculative": sum(p.spec_active_evictions for p in pools),
        "peak_speculative_bytes_over_quota": int(max(sim.speculative_peak_over_quota, 0)),
        "sim_wall_s": wall_s,
        **_copy_fates(sim),
    }


def _copy_fates(sim: Simulator) -> dict[str, Any]:
    """``copy_fates``: what became of a replicating policy's copies, each followed to the
    first request that read its deepest block (used on its node, routed back to the source,
    routed to another node, or expired first), and ``base_router``, the anchor router the
    policy routes with (what ``kvcast verdict`` compares it with at low load); both absent for
    a plain router. A model policy also names the ``model`` it scored with (a path, or the
    MLflow URI it was given or defaulted to), and a router that matches prefixes (itself or
    the base router) its ``prefix_view``: router, engine or both."""
    out: dict[str, Any] = {}
    model = getattr(sim.policy, "model", None)
    if isinstance(model, str):
        out["model"] = model
    fates = getattr(sim.replicator, "copy_fates", None)
    if fates is not None:
        out["copy_fates"] = fates()
    router = getattr(sim.replicator, "base_router", None)
    if router is not None:
        out["base_router"] = router
    if sim.prefix_view is not None:
        out["prefix_view"] = sim.prefix_view
    return out
