"""The calibration post-step every exported model declares: a piecewise-linear table.

Training fits isotonic regression or a Platt sigmoid on the validation window
(:mod:`kvcast.training.calibrate`) and stores the result as knots ``(x, y)`` in the model's
ONNX metadata. The scorer maps the graph's raw output through the same table with
:func:`numpy.interp` (flat beyond the end knots), so native and ONNX scoring agree exactly.
An empty table (no calibration fitted) maps the raw output by its declared ``link``: a
probability is clipped to [0, 1], a logit (a margin, as LightGBM's) goes through the sigmoid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

LINKS = ("probability", "logit")


@dataclass(frozen=True)
class Calibration:
    """Knots of a non-decreasing piecewise-linear map from raw score to probability."""

    method: str = "none"  # isotonic | platt | none
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    link: str = "probability"  # without a table, the raw output is: probability | logit

    def __post_init__(self) -> None:
        if self.link not in LINKS:
            raise ValueError(f"calibration link {self.link!r}; valid: {', '.join(LINKS)}")
        if len(self.x) != len(self.y):
            raise ValueError("calibration table: x and y differ in length")
        if any(b < a for a, b in zip(self.x, self.x[1:], strict=False)):
            raise ValueError("calibration table: x must be non-decreasing")
        if any(not 0.0 <= v <= 1.0 for v in self.y):
            raise ValueError("calibration table: y must lie in [0, 1]")

    @property
    def is_identity(self) -> bool:
        return not self.x

    def apply(self, raw: np.ndarray) -> np.ndarray:
        """Probabilities for raw scores (NaN stays NaN; the scorer replaces it)."""
        raw = np.asarray(raw, dtype=np.float64)
        if self.is_identity:
            if self.link == "logit":
                with np.errstate(over="ignore"):
                    return 1.0 / (1.0 + np.exp(-raw))
            return np.clip(raw, 0.0, 1.0)
        out = np.interp(raw, self.x, self.y)
        out[np.isnan(raw)] = np.nan
        return out

    def to_json(self) -> str:
        return json.dumps(
            {"method": self.method, "x": list(self.x), "y": list(self.y), "link": self.link}
        )

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        d = json.loads(text)  # models exported before the link was declared: probability
        x, y = tuple(map(float, d["x"])), tuple(map(float, d["y"]))
        return cls(str(d["method"]), x, y, str(d.get("link", "probability")))
