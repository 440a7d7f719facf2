"""The plots a training run leaves: what they draw is what the metrics say."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvcast.predictor.metrics import average_precision
from kvcast.training.report import plot_pr, pr_steps


def test_the_drawn_pr_curve_encloses_the_average_precision() -> None:
    """Precision at a threshold holds over the recall that threshold adds (a step, from
    recall 0): straight lines between the points would draw precision that no threshold
    gives, and an area that is not the AP printed beside the curve."""
    rng = np.random.default_rng(0)
    y = (rng.random(2000) < 0.1).astype(float)
    p = np.round(rng.random(2000) * 0.5 + 0.3 * y, 1)  # few distinct scores: wide steps
    w = np.where(y > 0, 1.0, 4.0)
    recall, precision = pr_steps(y, w, p)
    assert recall[0] == 0.0 and recall[-1] == 1.0 and np.all(np.diff(recall) >= 0)
    area = float(np.sum(np.diff(recall) * precision[1:]))
    assert np.isclose(area, average_precision(y, p, w), rtol=0, atol=1e-12)


def test_plot_pr_writes_the_figure(tmp_path: Path) -> None:
    y, w, p = np.array([0.0, 1.0, 0.0, 1.0]), np.ones(4), np.array([0.1, 0.9, 0.4, 0.4])
    path = plot_pr(y, w, {"m": p}, tmp_path / "pr.png")
    assert path.stat().st_size > 0
