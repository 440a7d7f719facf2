"""Shadow evaluation: replay a decision log against the requests that actually arrived.

The log is the sidecar's Parquet decision log (:mod:`kvcast.serving.sidecar.decision_log`;
any file with its columns will do), read with all its parts; a part its killed writer left
without a footer is skipped with a warning (its rows were lost), unless nothing else is left.
Only ``replicate`` and ``promote`` rows are judged;
``evict`` rows are counted and set aside. Times are put on one clock: a decision at ``ts_ms``
happened at trace time ``t = ts_ms - clock_offset_ms`` (the trace after the same arrival
spreading and time-scaling as the run that made the log).

Definitions (per judged decision; the copy is the last ``blocks_moved`` of ``block_hashes``):

- **hit**: some request of the same tenant (any tenant when the log's is ``""``) whose
  chain contains the copy's first block arrives in ``(t, t + ttl_ms]``: after the decision,
  while the replica would still be alive. The trace does not say which node that request
  would have gone to, so a hit is "the copied prefix was used while the copy lived", an
  upper bound for a router that always uses the copy.
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
  at least ``min_covered`` of the hits have ``lead >= transfer``.
- **censored**: a miss whose TTL window runs past the last arrival (the trace cannot tell).
"""

from __future__ import annotations

import glob
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kvcast.features.traces import Trace

JUDGED = ("replicate", "promote")
REQUIRED: dict[str, str] = {
    "ts_ms": "number", "kind": "string", "tenant": "string", "block_hashes": "list of integers",
    "blocks_moved": "integer", "bytes": "integer", "ttl_ms": "number", "p_hit": "number",
    "saved_ms": "number", "transfer_ms": "number",
}  # fmt: skip
OPTIONAL: dict[str, str] = {"eta_ms": "number"}
_CHECK: dict[str, Callable[[pa.DataType], bool]] = {
    "number": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "integer": pa.types.is_integer,
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "list of integers": lambda t: (
        (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)
    ),
}


class DecisionLogError(ValueError):
    """A decision log cannot be evaluated; the message names the file and the column."""


@dataclass(frozen=True)
class ShadowConfig:
    clock_offset_ms: float = 0.0  # the log's clock at trace time 0
    min_covered: float = 0.9  # go-live: this share of hits must have lead >= transfer
    transfer_weight: float = 0.25  # the decider's costs.transfer_weight
    promote_transfer_weight: float = 0.2  # the decider's costs.promote_transfer_weight


@dataclass(frozen=True)
class ShadowResult:
    outcomes: pd.DataFrame  # one row per judged decision
    summary: dict[str, Any]


log = logging.getLogger(__name__)


class TruncatedLogError(DecisionLogError):
    """A log file with no footer: its writer was killed before closing it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cause = f"{path}: truncated Parquet decision log (no footer: its writer was stopped "
        self.cause += "before closing it)"
        super().__init__(f"{self.cause}; its row groups cannot be read")


def read_decisions(path: str | Path, warn: Callable[[str], None] | None = None) -> pd.DataFrame:
    """The decision log as a DataFrame, its columns checked; DecisionLogError otherwise.

    ``path`` is a run's log (its first part; its other parts, ``<stem>.part-0002.parquet``,
    ... beside it, are read after it), one part, or a directory whose ``*.parquet`` files are
    read together, run by run (a sidecar restarted on the same path writes
    ``<stem>.1.parquet``, ``<stem>.2.parquet``, ... beside the first run's log), each run's
    parts in order. A file without its footer (the part being written when its sidecar was
    killed) is skipped and ``warn`` (default: a logged warning) told; when nothing else is
    left to read, its DecisionLogError is raised instead."""
    p = Path(path)
    if p.is_dir():
        files = sorted((f for f in p.glob("*.parquet") if f.is_file()), key=_run_order)
        if not files:
            raise DecisionLogError(f"{p}: a directory without any *.parquet decision log")
    elif p.is_file():
        files = [p, *_later_parts(p)]
    else:
        raise DecisionLogError(f"{p}: no such decision log")
    read: list[tuple[Path, pd.DataFrame]] = []
    cut: list[TruncatedLogError] = []
    for f in files:
        try:
            read.append((f, _read_one(f)))
        except TruncatedLogError as err:
            cut.append(err)
    if not read:
        raise cut[0]
    for err in cut:
        (warn or log.warning)(f"{err.cause}: skipped, its rows were lost")
    frames = [df for _, df in read]
    df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    _check_unique_ids(df, [(f, len(x)) for f, x in read])
    return df


def _later_parts(first: Path) -> list[Path]:
    """The parts after ``first`` of the run it starts (none when ``first`` is itself a later
    part), in order."""
    if _split(first.stem, ".part-", 1)[0] != first.stem:
        return []
    parts = first.parent.glob(f"{glob.escape(first.stem)}.part-*{glob.escape(first.suffix)}")
    later = [f for f in parts if f.is_file() and _split(f.stem, ".part-", 1)[0] == first.stem]
    return sorted(later, key=_run_order)


def _split(stem: str, sep: str, default: int) -> tuple[str, int]:
    """``("decisions", 2)`` for ``decisions<sep>2``; ``(stem, default)`` when it has none."""
    head, _, n = stem.rpartition(sep)
    return (head, int(n)) if head and n.isdigit() else (stem, default)


def _run_order(f: Path) -> tuple[str, int, int, str]:
    """``decisions.parquet``, ``decisions.part-0002.parquet``, ..., ``decisions.1.parquet``,
    ``decisions.1.part-0002.parquet``, ...: runs in the order they were started
    (``free_path``'s names), each run's parts in theirs (``part_path``'s); not the names'
    order (where ``.10`` sorts before ``.2``)."""
    run, part = _split(f.stem, ".part-", 1)
    base, n = _split(run, ".", 0)
    return (base, n, part, f.name)


def _read_one(p: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(p)
    except (pa.ArrowException, OSError) as exc:
        if _truncated(p):
            raise TruncatedLogError(p) from None
        raise DecisionLogError(f"{p}: not a readable Parquet decision log ({exc})") from None
    schema = table.schema
    for col, kind in {**REQUIRED, **OPTIONAL}.items():
        if col not in schema.names:
            if col in REQUIRED:
                raise DecisionLogError(f"{p}: missing column {col!r} ({kind})")
            continue
        if not _CHECK[kind](schema.field(col).type):
            got = schema.field(col).type
            raise DecisionLogError(f"{p}: column {col!r} is {got}, expected {kind}")
    df = table.to_pandas()
    _check_values(df, p)
    return df


def _truncated(p: Path) -> bool:
    """A Parquet file that was started (leading magic) but never closed (no trailing one)."""
    try:
        with p.open("rb") as f:
            head = f.read(4)
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError:
        return False
    return head == b"PAR1" and (size < 12 or tail != b"PAR1")


def _check_unique_ids(df: pd.DataFrame, files: list[tuple[Path, int]]) -> None:
    """Decision ids are unique across runs: a repeated one means rows counted twice (a log
    concatenated with itself, the same run's file given twice)."""
    if "decision_id" not in df.columns:
        return
    ids = df["decision_id"]
    dup = ids.notna() & ids.duplicated(keep="first")
    if not dup.any():
        return
    j = int(np.flatnonzero(dup.to_numpy())[0])
    i = int(np.flatnonzero((ids == ids.iloc[j]).to_numpy())[0])

    def where(k: int) -> str:
        for f, n in files:
            if k < n:
                return f"{f}: row {k}"
            k -= n
        return f"row {k}"  # pragma: no cover

    raise DecisionLogError(
        f"{where(j)}: column 'decision_id' = {ids.iloc[j]!r} repeats {where(i)} (each "
        "decision is logged once: is a log given twice?)"
    )


def _check_values(df: pd.DataFrame, p: Path) -> None:
    judged = df["kind"].isin(JUDGED).to_numpy()
    p_hit = df["p_hit"].to_numpy(float)
    eta = df["eta_ms"].to_numpy(float) if "eta_ms" in df.columns else np.full(len(df), np.nan)
    transfer = df["transfer_ms"].to_numpy(float)
    checks = [
        ("ts_ms", ~np.isfinite(df["ts_ms"].to_numpy(float)), "is not a finite time"),
        ("ttl_ms", judged & ~(df["ttl_ms"].to_numpy(float) > 0), "must be > 0"),
        ("blocks_moved", judged & (df["blocks_moved"].to_numpy() < 1), "must be >= 1"),
        ("bytes", df["bytes"].to_numpy() < 0, "must be >= 0"),
        ("p_hit", judged & ((p_hit < 0) | (p_hit > 1)), "is not a probability (NaN: unknown)"),
        ("saved_ms", judged & ~np.isfinite(df["saved_ms"].to_numpy(float)),
         "is not a finite number of ms"),
        ("transfer_ms", judged & ~np.isfinite(eta) & ~np.isfinite(transfer),
         "is not a finite number of ms (and the row has no eta_ms)"),
    ]  # fmt: skip
    n_listed = df["block_hashes"].map(lambda x: 0 if x is None else len(x)).to_numpy()
    checks.append(
        ("blocks_moved", judged & (df["blocks_moved"].to_numpy() > n_listed),
         "exceeds the number of block_hashes listed")
    )  # fmt: skip
    for col, bad, why in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            value = df[col].iloc[i]
            value = value.item() if isinstance(value, np.generic) else value
            raise DecisionLogError(f"{p}: row {i}: column {col!r} = {value!r} {why}")


class ArrivalIndex:
    """Per (tenant, block): the sorted arrival times of the requests whose chain has it."""

    def __init__(self, trace: Trace) -> None:
        df = trace.requests
        lengths = df["block_hashes"].map(len).to_numpy()
        arrivals = np.repeat(df["arrival_ms"].to_numpy(np.float64), lengths)
        blocks = np.fromiter(
            (int(b) & 0xFFFFFFFFFFFFFFFF for chain in df["block_hashes"] for b in chain),
            dtype=np.uint64, count=int(lengths.sum()),
        )  # fmt: skip
        tenants = np.repeat(df["tenant"].to_numpy(dtype=object), lengths)
        self.by_tenant: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for tenant in pd.unique(tenants):
            sel = tenants == tenant
            b, a = blocks[sel], arrivals[sel]
            order = np.lexsort((a, b))
            self.by_tenant[str(tenant)] = (b[order], a[order])
        arr = df["arrival_ms"].to_numpy(np.float64)
        self.first_ms = float(arr[0]) if len(arr) else math.nan
        self.last_ms = float(arr[-1]) if len(arr) else math.nan

    def next_use(self, tenant: str, block: int, after_ms: float) -> float:
        """The first arrival strictly after ``after_ms`` that uses ``block`` (inf: none);
        ``tenant == ""`` searches every tenant."""
        tables = self.by_tenant.values() if tenant == "" else [self.by_tenant.get(tenant, _EMPTY)]
        best = math.inf
        key = np.uint64(block)
        for blocks, arrivals in tables:
            lo, hi = np.searchsorted(blocks, key, "left"), np.searchsorted(blocks, key, "right")
            j = lo + int(np.searchsorted(arrivals[lo:hi], after_ms, "right"))
            if j < hi:
                best = min(best, float(arrivals[j]))
        return best


_EMPTY = (np.zeros(0, np.uint64), np.zeros(0))


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
) -> ShadowResult:
    """Judge every replicate / promote decision of ``decisions`` against ``trace``."""
    index = ArrivalIndex(trace)
    df = decisions[decisions["kind"].isin(JUDGED)].reset_index(drop=True)
    t = df["ts_ms"].to_numpy(float) - cfg.clock_offset_ms
    ttl = df["ttl_ms"].to_numpy(float)
    _check_overlap(t, ttl, index)
    arrival = np.full(len(df), math.inf)
    chains, moved, tenants = df["block_hashes"], df["blocks_moved"].to_numpy(), df["tenant"]
    step = max(len(df) // 100, 1)
    for i in range(len(df)):
        chain = chains.iloc[i]
        first = int(chain[len(chain) - int(moved[i])])
        arrival[i] = index.next_use(str(tenants.iloc[i]), first, t[i])
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
    summary = _summary(out, decisions, cfg, eta_source)
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
    out: pd.DataFrame, decisions: pd.DataFrame, cfg: ShadowConfig, eta_source: str
) -> dict[str, Any]:
    hits = out[out["hit"]]
    n, k = len(out), len(hits)
    covered = float(hits["covered"].mean()) if k else math.nan
    bytes_total = int(out["bytes"].sum())
    wasted = int(out.loc[~out["hit"], "bytes"].sum())
    passed = k > 0 and covered >= cfg.min_covered
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
        "bytes_decided": bytes_total,
        "bytes_wasted": wasted,
        "wasted_fraction": _f(wasted / bytes_total) if bytes_total else None,
        "ttft_saved_ms": float(hits["saved_ms"].sum()),
        "ttft_saved_expected_ms": None if unknown_p else float((p_hit * saved).sum()),
        "decisions_without_p_hit": unknown_p,
        "lead_covers_transfer_fraction": _f(covered),
        "go_live": {
            "rule": "lead time >= transfer time for at least min_covered of the hits",
            "min_covered": cfg.min_covered,
            "pass": passed,
        },
        "clock_offset_ms": cfg.clock_offset_ms,
    }
