"""The calibration post-step every exported model declares: a piecewise-linear table.

Training fits isotonic regression or a Platt sigmoid on the validation window
(:mod:`kvcast.training.calibrate`) and stores the result as knots ``(x, y)`` in the model's
ONNX metadata. The scorer maps the graph's raw output through the same table with
:func:`numpy.interp` (flat beyond the end knots), so native and ONNX scoring agree exactly.
An empty table is the identity (the raw output is already a probability).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Calibration:
    """Knots of a non-decreasing piecewise-linear map from raw score to probability."""

    method: str = "none"  # isotonic | platt | none
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()

    def __post_init__(self) -> None:
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
            return np.clip(raw, 0.0, 1.0)
        out = np.interp(raw, self.x, self.y)
        out[np.isnan(raw)] = np.nan
        return out

    def to_json(self) -> str:
        return json.dumps({"method": self.method, "x": list(self.x), "y": list(self.y)})

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        d = json.loads(text)
        return cls(str(d["method"]), tuple(map(float, d["x"])), tuple(map(float, d["y"])))
