"""Shadow evaluation: replay a decision log against the requests that actually arrived.

The log is the sidecar's Parquet decision log (:mod:`kvcast.serving.sidecar.decision_log`;
any file with its columns will do), read with all its parts; a part its killed writer left
without a footer is skipped with a warning (its rows were lost), unless nothing else is left.
Only ``replicate`` and ``promote`` rows are judged;
``evict`` rows are counted and set aside. Times are put on one clock: a decision at ``ts_ms``
happened at trace time ``t = ts_ms - clock_offset_ms`` (the trace after the same arrival
spreading and time-scaling as the run that made the log).

Definitions (per judged decision; the copy is the last ``blocks_moved`` of ``block_hashes``):

- **hit** (any node): some request of the same tenant (any tenant when the log's is ``""``)
  whose chain contains the copy's first block arrives in ``(t, t + ttl_ms]``: after the
  decision, while the replica would still be alive. Its first such request is the hit's
  *request*. The trace does not say which node that request went to, so a hit is "the
  copied prefix was used while the copy lived", on any node: an upper bound for a router
  that always uses the copy. ``hit_rate``, ``bytes_wasted`` and ``wasted_fraction`` are this
  reading.
- **routed to the target / source / elsewhere** (with ``routes``: where each request was
  routed, e.g. ``simulate``'s ``requests.parquet`` of the shadow run): the node the hit's
  request went to is the decision's ``target`` (where the copy would land: in active mode
  only then does a copy pay), its ``source`` (the holder: the request used the original),
  or another node. A promotion's source is its target (its own lower tier), so its hits are
  on the target or elsewhere. In shadow mode no copy exists, so the router chose without it:
  a KV-aware router would have sent some of the requests counted elsewhere to the copy. The
  target reading (``hit_rate_on_target``, ``bytes_wasted_off_target``: the bytes of every
  decision not hit on its target, misses and hits routed to the source or elsewhere) is
  therefore the pessimistic one, the any-node reading the optimistic one; an active run
  lies between them. As the simulator's ``copy_fates``, only the first request is followed.
- **lead**: the first such arrival minus ``t``.
- **transfer**: the copy's time to land: the log's ``eta_ms`` when present, else its
  weighted ``transfer_ms`` divided by the decider's ``transfer_weight`` (replicate) or
  ``promote_transfer_weight`` (promote); a tier penalty included in ``transfer_ms`` makes
  this an over-estimate, i.e. conservative for the go-live rule.
- **hidden**: ``min(lead, transfer)`` of a hit: transfer time that would run before the use.
- **wasted bytes**: ``bytes`` of the decisions that were not hit.
- **TTFT saved**: ``saved_ms`` of the hits (``p_hit x saved_ms`` over all decisions is what
  the decider expected).
- **go-live rule** (source document 000): lead time covers the transfer time; it passes when
  at least ``min_covered`` of the hits (any node) have ``lead >= transfer``, and there are at
  least ``min_hits`` hits to judge by (one hit covered is no evidence: a log replayed against
  the wrong trace can get one by chance). The routes do not change it: where a request went
  does not change when the copy would have landed.
- **censored**: a miss whose TTL window runs past the last arrival (the trace cannot tell).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kvcast.features.traces import Trace
from kvcast.predictor.decision_log_reader import (  # noqa: F401  (read_*: the API)
    JUDGED,
    DecisionLogError,
    RoutesError,
    TruncatedLogError,
    read_decisions,
    read_routes,
)
from kvcast.predictor.shadow_routes import on_target, route_of_hits, wasted_off_target


@dataclass(frozen=True)
class ShadowConfig:
    clock_offset_ms: float = 0.0  # the log's clock at trace time 0
    min_covered: float = 0.9  # go-live: this share of hits must have lead >= transfer
    min_hits: int = 20  # go-live: and at least this many hits to judge by
    transfer_weight: float = 0.25  # the decider's costs.transfer_weight
    promote_transfer_weight: float = 0.2  # the decider's costs.promote_transfer_weight


@dataclass(frozen=True)
class ShadowResult:
    outcomes: pd.DataFrame  # one row per judged decision
    summary: dict[str, Any]


log = logging.getLogger(__name__)


class ArrivalIndex:
    """Per (tenant, block): the sorted arrival times (and trace rows) of the requests whose
    chain has it."""

    def __init__(self, trace: Trace) -> None:
        df = trace.requests
        lengths = df["block_hashes"].map(len).to_numpy()
        arrivals = np.repeat(df["arrival_ms"].to_numpy(np.float64), lengths)
        rows = np.repeat(np.arange(len(df), dtype=np.int64), lengths)
        blocks = np.fromiter(
            (int(b) & 0xFFFFFFFFFFFFFFFF for chain in df["block_hashes"] for b in chain),
            dtype=np.uint64, count=int(lengths.sum()),
        )  # fmt: skip
        tenants = np.repeat(df["tenant"].to_numpy(dtype=object), lengths)
        self.by_tenant: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for tenant in pd.unique(tenants):
            sel = tenants == tenant
            b, a, r = blocks[sel], arrivals[sel], rows[sel]
            order = np.lexsort((r, a, b))
            self.by_tenant[str(tenant)] = (b[order], a[order], r[order])
        arr = df["arrival_ms"].to_numpy(np.float64)
        self.first_ms = float(arr[0]) if len(arr) else math.nan
        self.last_ms = float(arr[-1]) if len(arr) else math.nan

    def first_use(self, tenant: str, block: int, after_ms: float) -> tuple[float, int]:
        """The first arrival strictly after ``after_ms`` that uses ``block`` and its trace row
        (``(inf, -1)``: none; of requests arriving together, the first row); ``tenant == ""``
        searches every tenant."""
        tables = self.by_tenant.values() if tenant == "" else [self.by_tenant.get(tenant, _EMPTY)]
        best = (math.inf, -1)
        key = np.uint64(block)
        for blocks, arrivals, rows in tables:
            lo, hi = np.searchsorted(blocks, key, "left"), np.searchsorted(blocks, key, "right")
            j = lo + int(np.searchsorted(arrivals[lo:hi], after_ms, "right"))
            if j < hi and (float(arrivals[j]), int(rows[j])) < best:
                best = (float(arrivals[j]), int(rows[j]))
        return best

    def next_use(self, tenant: str, block: int, after_ms: float) -> float:
        """The first arrival strictly after ``after_ms`` that uses ``block`` (inf: none)."""
        return self.first_use(tenant, block, after_ms)[0]


_EMPTY = (np.zeros(0, np.uint64), np.zeros(0), np.zeros(0, np.int64))


def _eta_ms(df: pd.DataFrame, cfg: ShadowConfig) -> tuple[np.ndarray, str]:
    """Each decision's time to land: its logged ``eta_ms`` where that is a finite number, else
    its weighted ``transfer_ms`` over the weight; and where the figures came from."""
    n = len(df)
    eta = df["eta_ms"].to_numpy(float) if "eta_ms" in df.columns else np.full(n, np.nan)
    logged = np.isfinite(eta)
    if "eta_ms" in df.columns and logged.all():
        return eta, "eta_ms"
    weight = np.where(df["kind"] == "promote", cfg.promote_transfer_weight, cfg.transfer_weight)
    if ((weight <= 0) & ~logged).any():
        raise DecisionLogError(
            "transfer_weight is 0: the log's weighted transfer_ms cannot be turned into a "
            "time to land; log an eta_ms column"
        )
    derived = df["transfer_ms"].to_numpy(float) / np.where(logged, 1.0, weight)
    if not logged.any():
        return derived, "transfer_ms / transfer_weight"
    return np.where(logged, eta, derived), "eta_ms, else transfer_ms / transfer_weight"


def evaluate_shadow(
    decisions: pd.DataFrame,
    trace: Trace,
    cfg: ShadowConfig = ShadowConfig(),
    progress: Callable[[int, int], None] | None = None,
    routes: pd.Series | None = None,
) -> ShadowResult:
    """Judge every replicate / promote decision of ``decisions`` against ``trace``; with
    ``routes`` (request id -> node, :func:`read_routes`), also where each hit's request went."""
    index = ArrivalIndex(trace)
    df = decisions[decisions["kind"].isin(JUDGED)].reset_index(drop=True)
    if routes is not None and (
        not {"source", "target"} <= set(df.columns)
        or df[["source", "target"]].isna().any(axis=None)
    ):
        raise DecisionLogError(
            "the log has no source and target node of each copy: the routes cannot say "
            "whether a hit's request went to the copy's node"
        )
    t = df["ts_ms"].to_numpy(float) - cfg.clock_offset_ms
    ttl = df["ttl_ms"].to_numpy(float)
    _check_overlap(t, ttl, index)
    arrival, row = np.full(len(df), math.inf), np.full(len(df), -1, np.int64)
    chains, moved, tenants = df["block_hashes"], df["blocks_moved"].to_numpy(), df["tenant"]
    step = max(len(df) // 100, 1)
    for i in range(len(df)):
        chain = chains.iloc[i]
        first = int(chain[len(chain) - int(moved[i])])
        arrival[i], row[i] = index.first_use(str(tenants.iloc[i]), first, t[i])
        if progress is not None and (i + 1) % step == 0:
            progress(i + 1, len(df))
    hit = arrival <= t + ttl
    if len(df) and not hit.any():
        _check_blocks_occur(df, index)
    lead = np.where(hit, arrival - t, math.nan)
    eta, eta_source = _eta_ms(df, cfg)
    out = pd.DataFrame({
        "decision_time_ms": t, "kind": df["kind"].to_numpy(), "hit": hit,
        "first_use_ms": np.where(hit, arrival, math.nan), "lead_ms": lead, "transfer_ms": eta,
        "hidden_ms": np.where(hit, np.minimum(lead, eta), 0.0),
        "covered": hit & (lead >= eta), "bytes": df["bytes"].to_numpy(np.int64),
        "saved_ms": df["saved_ms"].to_numpy(float), "p_hit": df["p_hit"].to_numpy(float),
        "censored": ~hit & (t + ttl > index.last_ms),
    })  # fmt: skip
    for end in ("source", "target"):  # -1: not logged
        out[end] = df[end].fillna(-1).to_numpy(np.int64) if end in df.columns else -1
    out["first_use_node"], out["routed_to"] = route_of_hits(out, trace, row, routes)
    summary = _summary(out, decisions, cfg, eta_source, routes is not None)
    return ShadowResult(out, summary)


def _first_blocks(df: pd.DataFrame) -> list[int]:
    moved = df["blocks_moved"].to_numpy()
    return [int(c[len(c) - int(m)]) for c, m in zip(df["block_hashes"], moved, strict=True)]


def _check_blocks_occur(df: pd.DataFrame, index: ArrivalIndex) -> None:
    """With no hit at all: refuse a log made against another trace or cluster, i.e. one whose
    tenants are none of the trace's, or whose copied blocks occur in no request of the trace
    (a decider only copies blocks that requests used)."""
    tenants = sorted({str(x) for x in df["tenant"]} - {""})
    if tenants and not set(tenants) & set(index.by_tenant):
        raise DecisionLogError(
            f"none of the log's tenants {tenants[:3]} is in the trace (its tenants: "
            f"{sorted(index.by_tenant)[:3]}): the log was made against another trace"
        )
    firsts = _first_blocks(df)
    if not any(math.isfinite(index.next_use("", b, -math.inf)) for b in firsts):
        raise DecisionLogError(
            f"none of the {len(firsts)} decisions' copied blocks occurs in the trace (e.g. "
            f"block {firsts[0]}): the log was made against another trace or cluster"
        )


def _check_overlap(t: np.ndarray, ttl: np.ndarray, index: ArrivalIndex) -> None:
    if not len(t):
        return
    inside = (t + ttl >= index.first_ms) & (t <= index.last_ms)
    if not inside.any():
        raise DecisionLogError(
            f"no decision falls within the trace: decisions at {t.min():.0f}..{t.max():.0f} ms, "
            f"arrivals at {index.first_ms:.0f}..{index.last_ms:.0f} ms (trace clock); "
            "set the clock offset (--clock-offset-ms) to the log's clock at trace time 0"
        )


def _f(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _summary(
    out: pd.DataFrame, decisions: pd.DataFrame, cfg: ShadowConfig, eta_source: str, routed: bool
) -> dict[str, Any]:
    hits = out[out["hit"]]
    n, k = len(out), len(hits)
    covered = float(hits["covered"].mean()) if k else math.nan
    bytes_total = int(out["bytes"].sum())
    wasted = int(out.loc[~out["hit"], "bytes"].sum())
    passed = k > 0 and k >= cfg.min_hits and covered >= cfg.min_covered
    p_hit, saved = out["p_hit"].to_numpy(float), out["saved_ms"].to_numpy(float)
    unknown_p = int((~np.isfinite(p_hit)).sum())  # the decider's expectation is then unknown
    return {
        "decisions": n,
        "by_kind": {kind: int((out["kind"] == kind).sum()) for kind in JUDGED},
        "evictions": int((decisions["kind"] == "evict").sum()),
        "hits": k,
        "hit_rate": _f(k / n) if n else None,
        "censored": int(out["censored"].sum()),
        "mean_lead_time_ms": _f(hits["lead_ms"].mean()) if k else None,
        "p50_lead_time_ms": _f(hits["lead_ms"].median()) if k else None,
        "transfer_ms_source": eta_source,
        "mean_transfer_ms_of_hits": _f(hits["transfer_ms"].mean()) if k else None,
        "transfer_hidden_ms": float(hits["hidden_ms"].sum()),
        **on_target(out, routed),
        "bytes_decided": bytes_total,
        "bytes_wasted": wasted,
        "wasted_fraction": _f(wasted / bytes_total) if bytes_total else None,
        **wasted_off_target(out, routed, bytes_total),
        "ttft_saved_ms": float(hits["saved_ms"].sum()),
        "ttft_saved_expected_ms": None if unknown_p else float((p_hit * saved).sum()),
        "decisions_without_p_hit": unknown_p,
        "lead_covers_transfer_fraction": _f(covered),
        "go_live": {
            "rule": "lead time >= transfer time for at least min_covered of the hits, "
            "and at least min_hits hits",
            "min_covered": cfg.min_covered,
            "min_hits": cfg.min_hits,
            "pass": passed,
        },
        "clock_offset_ms": cfg.clock_offset_ms,
    }
