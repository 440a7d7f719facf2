"""Rule-based predictor: four explicit signals from the source documents, additive evidence.

Signals (each 0/1; a signal whose inputs are missing does not fire):

- ``session_within_gap``: ``sess_since_last_ms <= a * sess_gap_ewma_ms`` -- the block's
  session is still inside its usual inter-arrival gap, so a re-access is due;
- ``prefix_hot``: ``heat_300s >= h`` -- the prefix is hot (long half-life heat);
- ``queue_rising``: ``node_queue_slope_30s >= q`` -- the home node's queue is growing;
- ``gap_ending``: ``sess_gap_ewma_ms - sess_since_last_ms <= e`` -- the think / tool-call
  gap is about to end (the usual gap elapses within ``e`` ms).

Thresholds ``a, h, q, e`` are fitted on the training window by grid search (quantiles of each
signal's variable; two rounds of coordinate ascent maximising the weighted log-likelihood of
the 16 signal patterns); the weights are then a weighted logistic regression on the four
signals. Raw score ``b + sum(w_i * s_i)``; calibration turns it into a probability. The ONNX
graph is built with onnx.helper and computes in float32 exactly like :meth:`predict_raw`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from kvcast.training.models.onnx_graph import GraphBuilder
from kvcast.training.models.params import RuleParams

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData

SINCE, EWMA = "sess_since_last_ms", "sess_gap_ewma_ms"
HEAT, SLOPE = "heat_300s", "node_queue_slope_30s"
SIGNALS = ("session_within_gap", "prefix_hot", "queue_rising", "gap_ending")
f32 = np.float32


@dataclass
class RuleModel:
    cols: dict[str, int]  # feature name -> column
    thresholds: tuple[float, float, float, float]  # a, h, q, e
    weights: tuple[float, float, float, float]
    bias: float
    n_features: int
    kind: str = "rule"
    output: str = "logit"  # the raw score is a weighted sum of signals
    window: int = 0
    missing: str = "a signal whose inputs are missing (NaN) does not fire"
    history: dict[str, list[float]] = field(default_factory=dict)

    def signals(self, x: np.ndarray) -> np.ndarray:
        """``[n, 4]`` 0/1 float32, computed in float32 like the ONNX graph."""
        return _signals(x, self.cols, self.thresholds)

    def predict_raw(self, x: np.ndarray) -> np.ndarray:
        s = self.signals(x)
        acc = s[:, 0] * f32(self.weights[0])
        for i in range(1, 4):
            acc = acc + s[:, i] * f32(self.weights[i])
        return acc + f32(self.bias)

    def to_onnx(self) -> onnx.ModelProto:
        g = GraphBuilder(self.n_features)
        a, h, q, e = (g.const(f32(t), "thr") for t in self.thresholds)
        since, ewma = g.column(self.cols[SINCE]), g.column(self.cols[EWMA])
        flags = [
            g.op("LessOrEqual", [since, g.op("Mul", [a, ewma])], SIGNALS[0]),
            g.op("GreaterOrEqual", [g.column(self.cols[HEAT]), h], SIGNALS[1]),
            g.op("GreaterOrEqual", [g.column(self.cols[SLOPE]), q], SIGNALS[2]),
            g.op("LessOrEqual", [g.op("Sub", [ewma, since]), e], SIGNALS[3]),
        ]
        terms = [
            g.op("Mul", [g.flag(s), g.const(f32(w), "w")])
            for s, w in zip(flags, self.weights, strict=True)
        ]
        acc = terms[0]
        for t in terms[1:]:
            acc = g.op("Add", [acc, t])
        return g.build(g.op("Add", [acc, g.const(f32(self.bias), "bias")]), "kvcast rule model")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bias": self.bias}
        for name, t, w in zip(SIGNALS, self.thresholds, self.weights, strict=True):
            out[f"{name}.threshold"], out[f"{name}.weight"] = t, w
        return out

    def importance(self, data: TrainingData) -> dict[str, float]:
        s = self.signals(data.x[data.rows("validation")])
        share = s.mean(axis=0) if len(s) else np.zeros(4)
        feats = ((SINCE, EWMA), (HEAT,), (SLOPE,), (SINCE, EWMA))
        out: dict[str, float] = {}
        for i, names in enumerate(feats):
            for n in names:
                out[n] = out.get(n, 0.0) + abs(self.weights[i]) * float(share[i]) / len(names)
        return out


def _signals(x: np.ndarray, cols: dict[str, int], thr: tuple[float, ...]) -> np.ndarray:
    since, ewma = x[:, cols[SINCE]].astype(f32), x[:, cols[EWMA]].astype(f32)
    with np.errstate(invalid="ignore"):
        s = np.stack(
            [
                since <= f32(thr[0]) * ewma,
                x[:, cols[HEAT]].astype(f32) >= f32(thr[1]),
                x[:, cols[SLOPE]].astype(f32) >= f32(thr[2]),
                (ewma - since) <= f32(thr[3]),
            ],
            axis=1,
        )
    return s.astype(f32)


def _pattern_loglik(s: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    code = (s * np.array([1, 2, 4, 8], dtype=f32)).sum(axis=1).astype(np.int64)
    wy = np.bincount(code, weights=w * y, minlength=16)
    ww = np.bincount(code, weights=w, minlength=16)
    p = np.clip((wy + 0.5) / (ww + 1.0), 1e-9, 1 - 1e-9)
    return float(np.sum(wy * np.log(p) + (ww - wy) * np.log1p(-p)) / max(w.sum(), 1e-300))


def _grid(v: np.ndarray, points: int) -> np.ndarray:
    v = v[np.isfinite(v)]
    if not len(v):
        return np.zeros(1, dtype=f32)
    return np.unique(np.quantile(v, np.linspace(0.02, 0.98, points)).astype(f32))


def fit(data: TrainingData, params: RuleParams, seed: int) -> RuleModel:
    from sklearn.linear_model import LogisticRegression

    absent = [n for n in (SINCE, EWMA, HEAT, SLOPE) if n not in data.spec.names]
    if absent:
        raise ValueError(f"rule model needs features the spec lacks: {', '.join(absent)}")
    cols = {n: data.spec.index(n) for n in (SINCE, EWMA, HEAT, SLOPE)}
    tr = data.rows("train")
    if len(tr) > params.max_fit_rows:
        tr = np.sort(np.random.default_rng(seed).choice(tr, params.max_fit_rows, replace=False))
    x, y, w = data.x[tr], data.y[tr].astype(np.float64), data.w[tr]
    since, ewma = x[:, cols[SINCE]], x[:, cols[EWMA]]
    with np.errstate(divide="ignore", invalid="ignore"):
        variables = (since / ewma, x[:, cols[HEAT]], x[:, cols[SLOPE]], ewma - since)
    grids = [_grid(v, params.grid_points) for v in variables]
    thr = [float(np.median(gr)) for gr in grids]
    trace: list[float] = []
    for _ in range(2):
        for i, gr in enumerate(grids):
            scores = [
                _pattern_loglik(_signals(x, cols, (*thr[:i], float(c), *thr[i + 1 :])), y, w)
                for c in gr
            ]
            thr[i] = float(gr[int(np.argmax(scores))])
            trace.append(max(scores))
    s = _signals(x, cols, tuple(thr))
    lr = LogisticRegression(C=10.0, max_iter=200).fit(s, y, sample_weight=w)
    model = RuleModel(
        cols,
        tuple(thr),
        tuple(float(c) for c in lr.coef_[0]),
        float(lr.intercept_[0]),
        len(data.spec),
    )
    model.history["rule_train_loglik"] = trace
    return model
