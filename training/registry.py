"""Model kinds behind one typed registry keyed by name.

Each kind is a module under :mod:`kvcast.training.models` with a ``fit(data, params, seed)``
function returning a :class:`FittedModel`; modules are imported only when their kind is
trained, so training the rule model never imports torch. An unknown name fails listing the
valid ones.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from kvcast.config import FrozenConfig
from kvcast.training.models.params import LgbmParams, RecencyParams, RuleParams, TcnParams

if TYPE_CHECKING:
    import onnx

    from kvcast.training.data import TrainingData


class FittedModel(Protocol):
    """A trained model: native raw scores, its ONNX graph, and what to log about it."""

    kind: str
    window: int  # 0: flat rows [n, F]; L: windows [n, L, F]
    missing: str  # how NaN features are scored (declared in the model's metadata)
    output: str  # what the raw score is: "logit" or "probability" (uncalibrated serving)
    history: dict[str, list[float]]  # per-iteration / per-epoch metrics

    def predict_raw(self, x: np.ndarray) -> np.ndarray:
        """Raw scores (the ONNX graph's output) for float32 rows or windows."""
        ...

    def to_onnx(self) -> onnx.ModelProto:
        """The graph: input ``features``, output ``score``; metadata added by the exporter."""
        ...

    def summary(self) -> dict[str, Any]:
        """Fitted values worth logging as parameters (thresholds, tree count ...)."""
        ...

    def importance(self, data: TrainingData) -> dict[str, float]:
        """Feature importance (any non-negative scale)."""
        ...


class Fit(Protocol):
    def __call__(self, data: TrainingData, params: Any, seed: int) -> FittedModel: ...


@dataclass(frozen=True)
class ModelKind:
    name: str
    params: type[FrozenConfig]
    module: str  # under kvcast.training.models, exposing ``fit``
    doc: str

    def fit(self, data: TrainingData, params: FrozenConfig, seed: int) -> FittedModel:
        if not isinstance(params, self.params):
            raise TypeError(f"{self.name}: expected {self.params.__name__}, got {params!r}")
        fit: Fit = importlib.import_module(f"kvcast.training.models.{self.module}").fit
        return fit(data, params, seed)


MODEL_KINDS: dict[str, ModelKind] = {
    k.name: k
    for k in (
        ModelKind("recency", RecencyParams, "recency", "rate by time since last use only"),
        ModelKind("rule", RuleParams, "rule", "documented thresholds over strong signals"),
        ModelKind("lgbm", LgbmParams, "lgbm", "LightGBM binary classifier"),
        ModelKind("tcn", TcnParams, "tcn", "temporal convolution over block history"),
    )
}


def model_kind(name: str) -> ModelKind:
    try:
        return MODEL_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown model kind {name!r}; valid: {', '.join(MODEL_KINDS)}") from None
