"""Recency baseline: the burst probability from time since the block's last use only.

What the learned models must beat. Fitted as weighted rates per quantile bin of
``since_last_ms`` on the training window (:class:`RecencyTable`); exported as a small ONNX
graph (compare with every bin edge, count, look the rate up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from kvcast.predictor.recency_table import FEATURE, RecencyTable
from kvcast.training.models.onnx_graph import GraphBuilder
from kvcast.training.models.params import RecencyParams

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData


def fit_table(data: TrainingData, bins: int = 32, prior_weight: float = 20.0) -> RecencyTable:
    tr = data.rows("train")
    j = data.spec.index(FEATURE)
    return RecencyTable.fit(data.x[tr, j], data.y[tr], data.w[tr], bins, prior_weight)


@dataclass
class RecencyModel:
    table: RecencyTable
    column: int
    n_features: int
    kind: str = "recency"
    output: str = "probability"  # the raw score is a rate
    window: int = 0
    missing: str = "a missing since_last_ms falls in the last (longest) bin"
    history: dict[str, list[float]] = field(default_factory=dict)

    def predict_raw(self, x: np.ndarray) -> np.ndarray:
        return self.table.predict(x[:, self.column])

    def to_onnx(self) -> onnx.ModelProto:
        g = GraphBuilder(self.n_features)
        x = g.column(self.column)
        big = g.const(np.float32(np.finfo(np.float32).max), "never")
        x = g.op("Where", [g.op("IsNaN", [x]), big, x], "since")
        x2 = g.op("Unsqueeze", [x, g.const(np.array([1], np.int64), "axis")], "since2")
        ge = g.op("GreaterOrEqual", [x2, g.const(np.array(self.table.edges, np.float32))])
        count = g.op(
            "ReduceSum",
            [g.flag(ge), g.const(np.array([1], np.int64), "axis")],
            "bin",
            keepdims=0,
        )
        idx = g.op("Cast", [count], "bin_i", to=onnx.TensorProto.INT64)
        rates = g.const(np.array(self.table.rates, np.float32), "rates")
        return g.build(g.op("Gather", [rates, idx], "rate", axis=0), "kvcast recency baseline")

    def summary(self) -> dict[str, Any]:
        return {"bins": len(self.table.rates)}

    def importance(self, data: TrainingData) -> dict[str, float]:
        return {FEATURE: 1.0}


def fit(data: TrainingData, params: RecencyParams, seed: int) -> RecencyModel:
    table = fit_table(data, params.bins, params.prior_weight)
    return RecencyModel(table, data.spec.index(FEATURE), len(data.spec))
