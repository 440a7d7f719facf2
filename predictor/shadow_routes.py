"""Where a shadow decision's hit went: the node its request was routed to, against the copy's
target and source (see :mod:`kvcast.predictor.shadow_eval` for the two readings, any node and
target only, and why the target one is the pessimistic one)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kvcast.features.traces import Trace
from kvcast.predictor.decision_log_reader import RoutesError


def route_of_hits(
    out: pd.DataFrame, trace: Trace, row: np.ndarray, routes: pd.Series | None
) -> tuple[pd.arrays.IntegerArray, np.ndarray]:
    """Per decision, the node its hit's request was routed to (NA: no hit, or no routes) and
    ``target``, ``source`` or ``elsewhere`` (``""``: the same). Every hit's request must
    have a route: one without is refused (the routes are of another run)."""
    n, hit = len(out), out["hit"].to_numpy(bool)
    first, where = pd.array([None] * n, dtype="Int64"), np.full(n, "", dtype=object)
    if routes is None or not hit.any():
        return first, where
    ids = trace.requests["request_id"].astype(str).to_numpy()[row[hit]]
    node = routes.reindex(ids)
    if node.isna().any():
        missing = ids[node.isna().to_numpy()]
        raise RoutesError(
            f"{len(missing)} of the {int(hit.sum())} hits' requests have no route (e.g. request "
            f"{missing[0]!r}): give the routes of the run that made the log, on the same trace"
        )
    node = node.to_numpy(np.int64)
    target, source = out["target"].to_numpy()[hit], out["source"].to_numpy()[hit]
    where[hit] = np.where(node == target, "target", np.where(node == source, "source", "elsewhere"))
    first[hit] = node
    return first, where


def on_target(out: pd.DataFrame, routed: bool) -> dict[str, Any]:
    """Where the hits' requests went (None without routes): counts, shares of the hits, and
    the hit rate of the target reading (hits routed to the copy's node over decisions)."""
    keys = ("target", "source", "elsewhere")
    if not routed:
        return {"hits_routed_to_target": None, "hits_routed_to_source": None,
                "hits_routed_elsewhere": None, "routed_to_target_fraction": None,
                "routed_to_source_fraction": None, "hit_rate_on_target": None}  # fmt: skip
    n, k = len(out), int(out["hit"].sum())
    count = {key: int((out["routed_to"] == key).sum()) for key in keys}
    return {
        "hits_routed_to_target": count["target"],
        "hits_routed_to_source": count["source"],
        "hits_routed_elsewhere": count["elsewhere"],
        "routed_to_target_fraction": _f(count["target"] / k) if k else None,
        "routed_to_source_fraction": _f(count["source"] / k) if k else None,
        "hit_rate_on_target": _f(count["target"] / n) if n else None,
    }


def wasted_off_target(out: pd.DataFrame, routed: bool, bytes_total: int) -> dict[str, Any]:
    """The bytes of the target reading's waste: every decision not hit on its target."""
    if not routed:
        return {"bytes_wasted_off_target": None, "wasted_fraction_off_target": None}
    wasted = int(out.loc[out["routed_to"] != "target", "bytes"].sum())
    return {
        "bytes_wasted_off_target": wasted,
        "wasted_fraction_off_target": _f(wasted / bytes_total) if bytes_total else None,
    }


def _f(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
