"""Quality metrics of burst probabilities, weighted so that negative sampling stays unbiased.

Each row carries the ``weight`` of the feature table (1 for positives, ``1/keep`` for kept
negatives): a weighted metric estimates the metric on the unsampled candidate set.

- ``pr_auc``: average precision (step-wise, ties share a threshold, as scikit-learn);
- ``roc_auc``, ``brier``; ``ece``: expected calibration error over equal-width bins;
- ``precision_at_budget`` / ``recall_at_budget``: at each tick the top-K candidates by
  probability are "replicated"; a negative of weight w counts as w rows, so the budget is
  filled by weight (the last row may be taken in part);
- ``mean_lead_time_ms``: over bursts caught (a positive row selected within the budget), the
  time from the earliest tick that selected it to the request that arrived (``label_next_ms``);
  a burst is one (block, arrival time) pair;
- ``rows``, ``positives``: rows scored (unweighted) and positive rows.
"""

from __future__ import annotations

import numpy as np

METRIC_NAMES = (
    "pr_auc",
    "roc_auc",
    "brier",
    "ece",
    "precision_at_budget",
    "recall_at_budget",
    "mean_lead_time_ms",
    "rows",
    "positives",
)


def check_probabilities(p: np.ndarray) -> None:
    """A ValueError naming the first row whose probability is not in [0, 1] (NaN included)."""
    bad = ~((p >= 0.0) & (p <= 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"probabilities must lie in [0, 1]: row {i} is {float(p[i])!r} "
            f"({int(bad.sum())} of {len(p)} rows out of range)"
        )


def _curve(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative weighted true and false positives at each distinct threshold, descending."""
    order = np.argsort(-p, kind="mergesort")
    p, y, w = p[order], y[order], w[order]
    last = np.r_[np.flatnonzero(np.diff(p)), len(p) - 1]
    return np.cumsum(w * y)[last], np.cumsum(w * (1 - y))[last]


def pr_curve(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted (recall, precision) at each distinct threshold, for plots."""
    tps, fps = _curve(y, p, w)
    if len(tps) == 0 or tps[-1] <= 0:
        return np.zeros(0), np.zeros(0)
    return tps / tps[-1], tps / np.maximum(tps + fps, 1e-300)


def average_precision(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> float:
    tps, fps = _curve(y, p, w)
    if len(tps) == 0 or tps[-1] <= 0:
        return float("nan")
    precision = tps / np.maximum(tps + fps, 1e-300)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def roc_auc(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> float:
    tps, fps = _curve(y, p, w)
    if len(tps) == 0 or tps[-1] <= 0 or fps[-1] <= 0:
        return float("nan")
    tpr, fpr = np.r_[0.0, tps / tps[-1]], np.r_[0.0, fps / fps[-1]]
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def brier(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> float:
    return float(np.sum(w * (p - y) ** 2) / np.sum(w)) if len(y) else float("nan")


def reliability(
    y: np.ndarray, p: np.ndarray, w: np.ndarray, bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per equal-width bin: weighted mean probability, observed rate and weight."""
    check_probabilities(p)
    b = np.minimum((p * bins).astype(np.int64), bins - 1)
    ww = np.bincount(b, weights=w, minlength=bins)
    mean_p = np.bincount(b, weights=w * p, minlength=bins) / np.maximum(ww, 1e-300)
    rate = np.bincount(b, weights=w * y, minlength=bins) / np.maximum(ww, 1e-300)
    return mean_p, rate, ww


def ece(y: np.ndarray, p: np.ndarray, w: np.ndarray, bins: int = 15) -> float:
    if not len(y):
        return float("nan")
    mean_p, rate, ww = reliability(y, p, w, bins)
    return float(np.sum(ww * np.abs(mean_p - rate)) / np.sum(ww))


def budget_share(tick: np.ndarray, p: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """Share of each row's weight taken by the top-``k`` selection of its tick."""
    order = np.lexsort((-p, tick))
    t, ws = tick[order], w[order]
    cum = np.cumsum(ws)
    first = np.r_[True, t[1:] != t[:-1]]
    base = np.maximum.accumulate(np.where(first, cum - ws, -np.inf))
    before = cum - ws - base  # weight ranked above the row within its tick
    room = k - before
    # a zero-weight row takes nothing, whether or not the budget reaches it (0/0 otherwise)
    share = np.clip(np.divide(room, ws, out=np.zeros_like(room), where=ws > 0), 0.0, 1.0)
    out = np.empty_like(share)
    out[order] = share
    return out


def mean_lead_time(
    caught: np.ndarray, block: np.ndarray, tick: np.ndarray, next_ms: np.ndarray
) -> float:
    """Mean over caught bursts of the longest lead (earliest selecting tick) to the arrival."""
    ok = caught & np.isfinite(next_ms)
    if not ok.any():
        return float("nan")
    arrival = np.round(tick[ok] + next_ms[ok], 3)
    _, code = np.unique(block[ok], return_inverse=True)
    order = np.lexsort((arrival, code.ravel()))
    a, c = arrival[order], code.ravel()[order]
    starts = np.flatnonzero(np.r_[True, (a[1:] != a[:-1]) | (c[1:] != c[:-1])])
    lead = np.maximum.reduceat(next_ms[ok][order], starts)
    return float(lead.mean())


def evaluate(
    prob: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    tick: np.ndarray,
    block: np.ndarray,
    next_ms: np.ndarray,
    *,
    budget_k: int = 64,
    ece_bins: int = 15,
) -> dict[str, float | int]:
    """Every metric of :data:`METRIC_NAMES` for probabilities ``prob`` of labels ``y``."""
    p = np.asarray(prob, dtype=np.float64)
    check_probabilities(p)
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    share = budget_share(np.asarray(tick), p, w, budget_k) if len(p) else np.zeros(0)
    taken = share * w
    tp = float(np.sum(taken * y))
    return {
        "pr_auc": average_precision(y, p, w),
        "roc_auc": roc_auc(y, p, w),
        "brier": brier(y, p, w),
        "ece": ece(y, p, w, ece_bins),
        "precision_at_budget": tp / taken.sum() if taken.sum() > 0 else float("nan"),
        "recall_at_budget": tp / np.sum(w * y) if np.sum(w * y) > 0 else float("nan"),
        "mean_lead_time_ms": mean_lead_time(
            (share > 0) & (y > 0), np.asarray(block), np.asarray(tick), np.asarray(next_ms)
        ),
        "rows": len(p),
        "positives": int(np.count_nonzero(y > 0)),
    }
