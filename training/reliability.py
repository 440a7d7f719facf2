"""Reliability bins of burst probabilities: equal-width (``uniform``) or equal-mass (``quantile``).

Burst probabilities are mostly below 0.2: over 15 equal-width bins nearly all the weight lands
in the first two or three, and a reliability diagram shows one point where the rows are and
points of a handful of rows elsewhere. Equal-mass bins (scikit-learn's
``calibration_curve(strategy="quantile")``) cut the probabilities where the weight is: a row
goes to bin ``floor(bins * W_below / W)``, ``W_below`` the weight of the rows with a lower
probability and ``W`` the total, so each bin holds about ``1/bins`` of the weight. Weight, not
rows: a kept negative stands for ``1/keep`` candidates, as in every metric. A bin is a range of
probabilities: rows that share one are never split, and ties can leave fewer bins.

The recorded ``ece`` keeps its definition (equal-width bins,
:func:`kvcast.predictor.metrics.ece`, as ``kvcast score`` and earlier MLflow runs computed it);
the equal-mass error is recorded beside it under its own name, ``ece_quantile``. It is the
larger where probabilities crowd one wide bin: over- and under-confident rows in that bin no
longer cancel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.predictor.metrics import check_probabilities

STRATEGIES = ("uniform", "quantile")


@dataclass(frozen=True)
class Reliability:
    """Per non-empty bin, in probability order: the range of probabilities it holds, the
    weighted mean probability, the observed (weighted) burst rate, its weight and rows."""

    lo: np.ndarray
    hi: np.ndarray
    mean_p: np.ndarray
    rate: np.ndarray
    weight: np.ndarray
    rows: np.ndarray

    @property
    def ece(self) -> float:
        """Expected calibration error over these bins (NaN without weight)."""
        total = float(self.weight.sum())
        if total <= 0:
            return float("nan")
        return float(np.sum(self.weight * np.abs(self.mean_p - self.rate)) / total)


def bin_of(p: np.ndarray, w: np.ndarray, bins: int, strategy: str) -> np.ndarray:
    """Each row's bin, ``0 .. bins - 1`` (equal-width as :mod:`kvcast.predictor.metrics`)."""
    if strategy == "uniform":
        return np.minimum((p * bins).astype(np.int64), bins - 1)
    if strategy != "quantile":
        raise ValueError(
            f"unknown reliability strategy {strategy!r}; valid: {', '.join(STRATEGIES)}"
        )
    order = np.argsort(p, kind="mergesort")
    ps, ws = p[order], w[order]
    below = np.cumsum(ws) - ws
    first = np.r_[True, ps[1:] != ps[:-1]]
    below = np.maximum.accumulate(np.where(first, below, -np.inf))  # a tie: its first row's
    total = float(ws.sum())
    b = np.floor(bins * below / total) if total > 0 else np.zeros(len(p))
    out = np.empty(len(p), dtype=np.int64)
    out[order] = np.clip(b, 0, bins - 1).astype(np.int64)
    return out


def reliability_bins(
    y: np.ndarray, p: np.ndarray, w: np.ndarray, bins: int, strategy: str = "quantile"
) -> Reliability:
    """The reliability diagram's bins of probabilities ``p`` for labels ``y``, weights ``w``."""
    p = np.asarray(p, dtype=np.float64)
    y, w = np.asarray(y, dtype=np.float64), np.asarray(w, dtype=np.float64)
    check_probabilities(p)
    b = bin_of(p, w, bins, strategy)
    rows = np.bincount(b, minlength=bins)
    used = rows > 0
    ww = np.bincount(b, weights=w, minlength=bins)
    safe = np.maximum(ww, 1e-300)
    lo = np.full(bins, np.inf)
    hi = np.full(bins, -np.inf)
    np.minimum.at(lo, b, p)
    np.maximum.at(hi, b, p)
    return Reliability(
        lo=lo[used],
        hi=hi[used],
        mean_p=(np.bincount(b, weights=w * p, minlength=bins) / safe)[used],
        rate=(np.bincount(b, weights=w * y, minlength=bins) / safe)[used],
        weight=ww[used],
        rows=rows[used],
    )
