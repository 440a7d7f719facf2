"""LightGBM binary classifier of bursts.

- early stopping on the validation window (a later time window, never a random sample);
- class imbalance: positives weigh ``sum(negative weight) / sum(positive weight)`` more
  (``class_weight: balanced``) on top of the negative-sampling weights; calibration on the
  validation window removes the resulting bias from the probabilities;
- monotone constraints where the physics is clear: by default every ``heat_*`` feature is
  non-decreasing (a hotter prefix never lowers the probability);
- excluded features are blanked (NaN) in training, so no split uses them;
- size capped (``num_boost_round``, ``num_leaves``) for the 1 ms / 1,024-row latency budget.

Missing values: LightGBM learns a default branch per split; the ONNX tree nodes carry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import TYPE_CHECKING, Any

import lightgbm as lgb
import numpy as np
import onnx

from kvcast.training.models.lgbm_onnx import booster_to_onnx, float32_thresholds
from kvcast.training.models.params import LgbmParams
from kvcast.training.models.weighting import class_balanced

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData


def matching(names: tuple[str, ...], patterns: tuple[str, ...]) -> list[int]:
    return [j for j, n in enumerate(names) if any(fnmatch(n, p) for p in patterns)]


@dataclass
class LgbmModel:
    booster: lgb.Booster
    names: tuple[str, ...]
    kind: str = "lgbm"
    output: str = "logit"  # the raw score is a margin
    window: int = 0
    missing: str = "NaN follows each split's learned default branch (LightGBM)"
    history: dict[str, list[float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def predict_raw(self, x: np.ndarray) -> np.ndarray:
        return self.booster.predict(np.asarray(x, dtype=np.float64), raw_score=True)

    def to_onnx(self) -> onnx.ModelProto:
        return booster_to_onnx(self.booster, len(self.names))

    def summary(self) -> dict[str, Any]:
        return {"trees": self.booster.num_trees(), **self.info}

    def importance(self, data: TrainingData) -> dict[str, float]:
        gain = self.booster.feature_importance("gain")
        return {n: float(g) for n, g in zip(self.names, gain, strict=True)}


@dataclass(frozen=True)
class LgbmInputs:
    """The training and validation windows and the booster parameters of one fit."""

    config: dict[str, Any]
    xt: np.ndarray
    yt: np.ndarray
    wt: np.ndarray  # class-balanced sampling weights
    xv: np.ndarray
    yv: np.ndarray
    wv: np.ndarray
    mono: list[int]
    excluded: list[int]


def fit_inputs(data: TrainingData, params: LgbmParams, seed: int) -> LgbmInputs:
    names = data.spec.names
    tr, va = data.rows("train"), data.rows("validation")
    xt, xv = data.x[tr], data.x[va]  # copies (fancy indexing)
    excluded = matching(names, params.exclude_features)
    xt[:, excluded] = np.nan
    xv[:, excluded] = np.nan
    mono = [0] * len(names)
    for j in matching(names, params.monotone_increasing):
        mono[j] = 1
    for j in matching(names, params.monotone_decreasing):
        mono[j] = -1
    config = {
        "objective": "binary",
        "metric": list(dict.fromkeys([params.early_stopping_metric, "binary_logloss", "auc"])),
        "first_metric_only": True,
        "learning_rate": params.learning_rate,
        "num_leaves": params.num_leaves,
        "min_data_in_leaf": params.min_data_in_leaf,
        "feature_fraction": params.feature_fraction,
        "bagging_fraction": params.bagging_fraction,
        "bagging_freq": params.bagging_freq,
        "lambda_l2": params.lambda_l2,
        "monotone_constraints": mono,
        "num_threads": params.num_threads,
        "seed": seed,
        "deterministic": True,
        "force_col_wise": True,
        "verbose": -1,
    }
    wt = class_balanced(data.y[tr], data.w[tr], params.class_weight)
    return LgbmInputs(config, xt, data.y[tr], wt, xv, data.y[va], data.w[va], mono, excluded)


def fitted_model(
    booster: lgb.Booster,
    best: int,
    names: tuple[str, ...],
    inputs: LgbmInputs,
    history: dict[str, list[float]],
) -> LgbmModel:
    """The booster cut at ``best`` trees, with thresholds exact in float32 (as served)."""
    exact = lgb.Booster(model_str=float32_thresholds(booster.model_to_string(num_iteration=best)))
    model = LgbmModel(exact, names)
    model.history = history
    model.info = {
        "best_iteration": best,
        "monotone_increasing": ",".join(names[j] for j, m in enumerate(inputs.mono) if m > 0),
        "excluded": ",".join(names[j] for j in inputs.excluded),
    }
    return model


def fit(data: TrainingData, params: LgbmParams, seed: int) -> LgbmModel:
    names = data.spec.names
    inp = fit_inputs(data, params, seed)
    train_set = lgb.Dataset(
        inp.xt, inp.yt, weight=inp.wt, feature_name=list(names), free_raw_data=True
    )
    valid_set = lgb.Dataset(inp.xv, inp.yv, weight=inp.wv, reference=train_set)
    record: dict[str, dict[str, list[float]]] = {}
    booster = lgb.train(
        inp.config,
        train_set,
        num_boost_round=params.num_boost_round,
        valid_sets=[valid_set],
        valid_names=["val"],
        callbacks=[
            lgb.early_stopping(params.early_stopping_rounds, first_metric_only=True, verbose=False),
            lgb.record_evaluation(record),
        ],
    )
    best = booster.best_iteration or booster.current_iteration()
    history = {f"val_{k}": list(map(float, v)) for k, v in record.get("val", {}).items()}
    return fitted_model(booster, best, names, inp, history)
