"""Score rows of a table with any model (native or ONNX) and compute the metrics.

Sequence models receive windows built from the table in chunks (``[chunk, L, F]`` at a time),
so a large test window never materialises as one array.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from kvcast.predictor.metrics import METRIC_NAMES, evaluate
from kvcast.predictor.windows import gather_windows
from kvcast.training.reliability import reliability_bins

Predict = Callable[[np.ndarray], np.ndarray]
CHUNK = 65_536
# what a training run and `kvcast score` record: the predictor's metrics, and after `ece`
# (equal-width bins) the same error over equal-mass bins (:mod:`kvcast.training.reliability`)
_AFTER_ECE = METRIC_NAMES.index("ece") + 1
METRICS = (*METRIC_NAMES[:_AFTER_ECE], "ece_quantile", *METRIC_NAMES[_AFTER_ECE:])


def predict_rows(
    predict: Predict,
    x: np.ndarray,
    idx: np.ndarray,
    window: int = 0,
    windows: np.ndarray | None = None,
) -> np.ndarray:
    """``predict`` over rows ``idx`` of ``x`` (or their windows when ``window > 0``)."""
    out = np.empty(len(idx), dtype=np.float64)
    for s in range(0, len(idx), CHUNK):
        part = idx[s : s + CHUNK]
        if window > 0:
            if windows is None:
                raise ValueError("a sequence model needs the table's window index")
            batch = gather_windows(x, windows[part])
        else:
            batch = x[part]
        out[s : s + len(part)] = predict(batch)
    return out


def metrics_of(
    prob: np.ndarray,
    frame: pd.DataFrame,
    idx: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    budget_k: int,
    ece_bins: int,
) -> dict[str, float | int]:
    """Every metric of :data:`METRICS` for probabilities of rows ``idx`` (labels ``y``,
    weights ``w`` full); both calibration errors over ``ece_bins`` bins."""
    out = evaluate(
        prob,
        y[idx],
        w[idx],
        frame["tick_ms"].to_numpy()[idx],
        frame["block"].to_numpy()[idx],
        frame["label_next_ms"].to_numpy(np.float64)[idx],
        budget_k=budget_k,
        ece_bins=ece_bins,
    )
    equal_mass = reliability_bins(y[idx], prob, w[idx], ece_bins, "quantile").ece
    return {name: equal_mass if name == "ece_quantile" else out[name] for name in METRICS}
