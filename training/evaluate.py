"""Score rows of a table with any model (native or ONNX) and compute the metrics.

Sequence models receive windows built from the table in chunks (``[chunk, L, F]`` at a time),
so a large test window never materialises as one array.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from kvcast.predictor.metrics import evaluate
from kvcast.predictor.windows import gather_windows

Predict = Callable[[np.ndarray], np.ndarray]
CHUNK = 65_536


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
    """Every metric for probabilities of rows ``idx`` (labels ``y``, weights ``w`` full)."""
    return evaluate(
        prob,
        y[idx],
        w[idx],
        frame["tick_ms"].to_numpy()[idx],
        frame["block"].to_numpy()[idx],
        frame["label_next_ms"].to_numpy(np.float64)[idx],
        budget_k=budget_k,
        ece_bins=ece_bins,
    )
