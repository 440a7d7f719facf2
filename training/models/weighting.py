"""Row weights for training: negative-sampling weights times a class-imbalance factor."""

from __future__ import annotations

import numpy as np


def class_balanced(y: np.ndarray, w: np.ndarray, class_weight: str | float) -> np.ndarray:
    """``balanced``: positives weigh sum(negative w) / sum(positive w) more; a number: that
    factor; ``none``: the sampling weights alone."""
    if class_weight == "none":
        return w
    if class_weight == "balanced":
        pos = float(np.sum(w[y > 0]))
        factor = float(np.sum(w[y == 0])) / pos if pos > 0 else 1.0
    else:
        factor = float(class_weight)
    return np.where(y > 0, w * factor, w)
