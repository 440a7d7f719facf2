"""Reading decision logs: the sidecar's Parquet log (:mod:`kvcast.serving.sidecar.decision_log`)
or any file with its columns, a run with all its parts, or a directory of runs, in order.

A part that its killed writer left without a footer is skipped with a warning (its rows were
lost), unless nothing else is left to read; columns of the wrong type, a repeated decision id
or values that cannot be judged are refused with the file and the column named
(:class:`DecisionLogError`). :mod:`kvcast.predictor.shadow_eval` judges what this reads.

Routes (:func:`read_routes`): where each request was routed, a Parquet table with
``request_id`` and ``node`` (``kvcast simulate``'s ``requests.parquet``, or the sidecar's
routes log, :mod:`kvcast.serving.sidecar.routes_log`, with its parts or its directory), so
that shadow evaluation can tell hits whose request went to the copy's node from the others.
A directory's routes logs (``*.routes*.parquet``) are not decision logs: reading it as one
leaves them out.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

JUDGED = ("replicate", "promote")

REQUIRED: dict[str, str] = {
    "ts_ms": "number", "kind": "string", "tenant": "string", "block_hashes": "list of integers",
    "blocks_moved": "integer", "bytes": "integer", "ttl_ms": "number", "p_hit": "number",
    "saved_ms": "number", "transfer_ms": "number",
}  # fmt: skip

OPTIONAL: dict[str, str] = {"eta_ms": "number", "source": "integer", "target": "integer"}

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


class TruncatedLogError(DecisionLogError):
    """A log file with no footer: its writer was killed before closing it, or (the part a
    running sidecar has open) has not closed it yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cause = f"{path}: truncated Parquet decision log (no footer: still being written, "
        self.cause += "or its writer was stopped before closing it)"
        super().__init__(f"{self.cause}; its row groups cannot be read")


class RoutesError(ValueError):
    """A routes table cannot be used; the message names the file (or, when the routes do
    not cover the requests judged, what is missing)."""


def read_routes(path: str | Path, warn: Callable[[str], None] | None = None) -> pd.Series:
    """Where each request was routed: ``node`` (int64) indexed by ``request_id`` (str), from a
    Parquet table with those two columns (others are ignored); RoutesError otherwise.

    ``path`` is one table, the first part of a sidecar's routes log (its later parts,
    ``<stem>.part-0002.parquet``, ..., are read after it), or a directory: its routes logs
    (``*.routes*.parquet``), every run's, every part. A part without its footer (its sidecar
    was killed) is skipped and ``warn`` (default: a logged warning) told, unless nothing else
    is left to read."""
    p = Path(path)
    if p.is_dir():
        files = routes_logs(p)
        if not files:
            raise RoutesError(f"{p}: a directory without any *.routes.parquet routes log")
    elif p.is_file():
        files = [p, *_later_parts(p)]
    else:
        raise RoutesError(f"{p}: no such routes file")
    read: list[pd.DataFrame] = []
    cut: list[Path] = []
    for f in files:
        try:
            read.append(_read_routes_one(f))
        except RoutesError:
            if not _truncated(f):
                raise
            cut.append(f)
    if not read:
        raise RoutesError(f"{cut[0]}: truncated Parquet routes log (no footer: still being "
                          "written, or its writer was stopped before closing it)")  # fmt: skip
    for f in cut:
        (warn or log.warning)(f"{f}: truncated Parquet routes log (no footer): skipped, its "
                              "rows were lost (or, while written, not yet readable)")  # fmt: skip
    df = read[0] if len(read) == 1 else pd.concat(read, ignore_index=True)
    ids = df["request_id"].astype(str)
    repeated = ids.duplicated(keep="first").to_numpy()
    bad = repeated | df["node"].isna().to_numpy() | df["request_id"].isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        why = "repeats an earlier row's id" if repeated[i] else "has no request_id or node"
        where = files[0] if len(files) == 1 else p
        raise RoutesError(f"{where}: row {i}: request {ids.iloc[i]!r} {why}")
    return pd.Series(df["node"].to_numpy(np.int64), index=pd.Index(ids, name="request_id"))


def routes_logs(directory: Path) -> list[Path]:
    """The sidecar routes logs' parts in ``directory``, every run's, in run order (what
    :func:`read_routes` reads of a directory; empty: none)."""
    return sorted((f for f in directory.glob("*.parquet") if f.is_file() and _is_routes(f)),
                  key=lambda f: _run_order(f.with_name(_unroutes(f.name))))  # fmt: skip


def _read_routes_one(p: Path) -> pd.DataFrame:
    try:
        schema = pq.read_schema(p)
        missing = [c for c in ("request_id", "node") if c not in schema.names]
        if missing:
            raise RoutesError(
                f"{p}: missing column {missing[0]!r} (routes: request_id and node, as in "
                "simulate's requests.parquet)"
            )
        table = pq.read_table(p, columns=["request_id", "node"])
    except (pa.ArrowException, OSError) as exc:
        raise RoutesError(f"{p}: not a readable Parquet routes table ({exc})") from None
    if not pa.types.is_integer(table.schema.field("node").type):
        raise RoutesError(f"{p}: column 'node' is {table.schema.field('node').type}, expected "
                          "integer")  # fmt: skip
    return table.to_pandas()


def _is_routes(f: Path) -> bool:
    """A sidecar routes log's part: ``decisions.routes.parquet``,
    ``decisions.1.routes.part-0002.parquet``, ``decisions.routes.1.parquet``."""
    return "routes" in f.name.split(".")[1:-1]


def _unroutes(name: str) -> str:
    """``decisions.1.routes.part-0002.parquet`` -> ``decisions.1.part-0002.parquet``: the
    decision log's name, for its run order."""
    parts = name.split(".")
    return ".".join(parts[:1] + [x for x in parts[1:-1] if x != "routes"] + parts[-1:])


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
        files = sorted((f for f in p.glob("*.parquet") if f.is_file() and not _is_routes(f)),
                       key=_run_order)  # fmt: skip
        lacking = {f: _lacks(f) for f in files}
        for f, col in lacking.items():  # a simulate run's requests.parquet, outcomes, ...
            if col is not None:
                (warn or log.warning)(f"{f}: not a decision log (no column {col!r}): skipped")
        files = [f for f in files if lacking[f] is None]
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
        (warn or log.warning)(
            f"{err.cause}: skipped, its rows were lost (or, while it is written, not yet readable)"
        )
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


def written_since(path: Path, since: float) -> Path | None:
    """The first part of the newest run of the decision log configured as ``path`` that was
    written at or after ``since`` (unix seconds) by any of its parts, or None. A sidecar
    started again on ``decisions.parquet`` writes ``decisions.1.parquet``, ... (the first free
    number, not the highest), so a run is told by when it wrote, not by its name alone."""
    base = path.stem
    runs = [f for f in path.parent.glob(f"{glob.escape(base)}*{glob.escape(path.suffix)}")
            if f.is_file() and not _is_routes(f) and _run_order(f)[0] == base
            and _run_order(f)[2] == 1]  # fmt: skip

    written = {f: max(p.stat().st_mtime for p in (f, *_later_parts(f))) for f in runs}
    recent = [f for f, t in written.items() if t >= since]
    return max(recent, key=written.__getitem__, default=None)


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


def _lacks(p: Path) -> str | None:
    """A required column a directory's Parquet file lacks (then it is not a decision log and
    is skipped); None when it has them all, or has no readable footer (a part cut short,
    which the reading reports)."""
    try:
        names = set(pq.read_schema(p).names)
    except (pa.ArrowException, OSError):
        return None
    return next((col for col in REQUIRED if col not in names), None)


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
