"""Fit the calibration post-step on the validation window (training only: scikit-learn).

Both methods end as the same declared artefact, a piecewise-linear table
(:class:`kvcast.predictor.calibration.Calibration`) of at most ``max_points`` knots placed
at quantiles of the validation raw scores:

- ``isotonic``: weighted isotonic regression, evaluated at the knots;
- ``platt``: a weighted logistic fit of the label on the raw score, sampled at the knots.

A tiny slope (1e-6 over the whole table) is added so the table is strictly increasing and
keeps the raw score's ranking: isotonic plateaus would otherwise tie rows the model ranked.
"""

from __future__ import annotations

import numpy as np

from kvcast.predictor.calibration import Calibration

TIE_BREAK = 1e-6


def _knots(raw: np.ndarray, max_points: int) -> np.ndarray:
    qs = np.quantile(raw, np.linspace(0.0, 1.0, max_points))
    return np.unique(qs)


def fit_calibration(
    raw: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    method: str,
    max_points: int = 64,
    link: str = "probability",
) -> Calibration:
    """The table; without one (``method: none``, or a validation window of one class) the
    raw output is served through its ``link`` (what the model's raw score is)."""
    raw = np.asarray(raw, dtype=np.float64)
    ok = np.isfinite(raw)
    raw, y, w = raw[ok], np.asarray(y, np.float64)[ok], np.asarray(w, np.float64)[ok]
    if method == "none" or len(raw) == 0 or len(np.unique(y)) < 2:
        return Calibration(link=link)
    x = _knots(raw, max_points)
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        iso.fit(raw, y, sample_weight=w)
        p = iso.predict(x)
    elif method == "platt":
        from sklearn.linear_model import LogisticRegression

        scale = max(float(np.std(raw)), 1e-12)
        lr = LogisticRegression(C=1e6, max_iter=500)
        lr.fit((raw / scale)[:, None], y, sample_weight=w)
        p = lr.predict_proba((x / scale)[:, None])[:, 1]
    else:
        raise ValueError(f"unknown calibration method {method!r}; valid: isotonic, platt, none")
    p = np.maximum.accumulate(np.clip(p, 0.0, 1.0))
    if len(x) > 1:
        p = p * (1 - TIE_BREAK) + TIE_BREAK * np.linspace(0.0, 1.0, len(x))
    return Calibration(method, tuple(float(v) for v in x), tuple(float(v) for v in p))
