"""Hyper-parameters of each model kind (the ``model:`` section of a train config).

Pydantic only: importing a config never imports torch or lightgbm. ``kind`` selects the
class (a discriminated union in :class:`kvcast.training.config.TrainConfig`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from kvcast.config import FrozenConfig


class RecencyParams(FrozenConfig):
    """Burst rate per quantile bin of ``since_last_ms`` (the baseline)."""

    kind: Literal["recency"] = "recency"
    bins: int = Field(32, ge=1, le=1024)  # quantile bins of the training rows
    prior_weight: float = Field(20.0, ge=0)  # shrink each bin's rate toward the base rate


class RuleParams(FrozenConfig):
    """Four explicit signals with thresholds found by grid search on the training window."""

    kind: Literal["rule"] = "rule"
    grid_points: int = Field(24, ge=2, le=256)  # candidate thresholds per signal (quantiles)
    max_fit_rows: int = Field(300_000, ge=1000)  # training rows used by the search


class LgbmParams(FrozenConfig):
    """LightGBM binary classifier; size capped so 1,024 rows score in about 1 ms."""

    kind: Literal["lgbm"] = "lgbm"
    num_boost_round: int = Field(16, ge=1)  # tree cap (latency budget)
    early_stopping_rounds: int = Field(20, ge=1)  # on the validation window
    early_stopping_metric: Literal["binary_logloss", "auc", "average_precision"] = "binary_logloss"
    num_leaves: int = Field(15, ge=2, le=131_072)  # LightGBM's own limit
    learning_rate: float = Field(0.1, gt=0)
    min_data_in_leaf: int = Field(200, ge=1)
    feature_fraction: float = Field(0.5, gt=0, le=1)
    bagging_fraction: float = Field(0.8, gt=0, le=1)
    bagging_freq: int = Field(1, ge=0)
    lambda_l2: float = Field(1.0, ge=0)
    # positives' extra weight: a finite number > 0 (0 or less trains a constant model)
    class_weight: (
        Literal["balanced", "none"] | Annotated[float, Field(gt=0, allow_inf_nan=False)]
    ) = 3.0
    monotone_increasing: tuple[str, ...] = ("heat_*",)  # fnmatch patterns of feature names
    monotone_decreasing: tuple[str, ...] = ()
    exclude_features: tuple[str, ...] = ()  # patterns: blanked in training, never split on
    num_threads: int = Field(2, ge=1)


class TcnParams(FrozenConfig):
    """Temporal convolution over each block's last ``window`` rows (Lightning, CPU)."""

    kind: Literal["tcn"] = "tcn"
    window: int = Field(8, ge=1, le=256)  # L: rows of history per input
    channels: int = Field(16, ge=1)
    kernel_size: int = Field(3, ge=1)
    layers: int = Field(2, ge=1)  # dilations 1, 2, 4, ...
    epochs: int = Field(3, ge=1)
    batch_size: int = Field(512, ge=1)
    learning_rate: float = Field(3e-3, gt=0)
    train_negative_keep: float = Field(0.25, gt=0, le=1)  # training targets: negatives kept
    max_train_windows: int = Field(200_000, ge=100)
    num_threads: int = Field(1, ge=1)  # torch intra-op threads (1: no OpenMP spin on busy CPUs)

    @model_validator(mode="after")
    def _reach_within_window(self) -> TcnParams:
        """Every layer's taps must reach into the window: past it they read only padding,
        whose length grows as ``(kernel_size - 1) * 2**layers`` (so does the memory)."""
        if self.kernel_size > self.window:
            raise ValueError(
                f"kernel_size={self.kernel_size} is wider than window={self.window}: its "
                "taps past the window read only padding"
            )
        if self.kernel_size > 1 and 2 ** (self.layers - 1) >= self.window:
            raise ValueError(
                f"layers={self.layers} with window={self.window}: the last layer's dilation "
                f"{2 ** (self.layers - 1)} reaches past the window (dilations 1, 2, 4, ... "
                "must stay below it)"
            )
        return self
