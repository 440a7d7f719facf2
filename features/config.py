"""Feature and label configuration (``configs/features/*.yaml``), frozen and validated.

Every time is in milliseconds on the event stream's clock. The defaults here are the values of
``configs/features/default.yaml`` (a test keeps the two equal), so code that runs without a
config file computes exactly what the shipped default describes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from kvcast.config import FrozenConfig, load_config
from kvcast.llm import LLM_PRESETS, KvDtype
from kvcast.prefill import PrefillModel


class SessionConfig(FrozenConfig):
    """Inter-arrival statistics of a session (explicit id, else inferred from the prefix)."""

    ewma_alpha: float = Field(0.3, gt=0, le=1)  # weight of the newest gap
    think_factor: float = Field(2.0, gt=0)  # "in a think gap" while since_last <= f x EWMA


class TickConfig(FrozenConfig):
    """Decision ticks and the candidate blocks scored at each."""

    period_ms: float = Field(5000.0, gt=0)
    start_ms: float | None = None  # None: the first event's time
    lookback_ms: float = Field(30000.0, gt=0)  # candidates: blocks requested in the last L ms


class LabelConfig(FrozenConfig):
    """``burst(b, t) = 1`` if at least ``k`` requests containing ``b`` arrive in (t, t+H]."""

    horizon_ms: float = Field(30000.0, gt=0)
    k: int = Field(1, ge=1)
    extra_k: tuple[Annotated[int, Field(ge=1)], ...] = (2,)  # more columns ``label_burst_k{j}``
    drop_censored: bool = True  # no ticks whose (t, t+H] runs past the last request

    @field_validator("extra_k")
    @classmethod
    def _distinct(cls, extra_k: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(extra_k)) != len(extra_k):  # one column each: a repeat would be dropped
            raise ValueError(f"values must be distinct, got {list(extra_k)}")
        return extra_k


class SamplingConfig(FrozenConfig):
    """Negative sampling; kept negatives carry weight 1/keep so metrics stay unbiased."""

    negative_keep: float = Field(0.25, gt=0, le=1)
    seed: int = 0


class FeatureConfig(FrozenConfig):
    """Everything that shapes a feature row or a label."""

    nodes: int = Field(8, ge=1)  # node ids 0..nodes-1; others are counted as unknown_node
    block_tokens: int = Field(512, ge=1)
    model: str = "llama-3-70b"
    kv_dtype: KvDtype = "fp16"
    prefill: PrefillModel = PrefillModel()
    heat_half_lives_ms: tuple[float, ...] = (5000.0, 30000.0, 300000.0)
    distinct_window_ms: float = Field(300000.0, gt=0)  # fan-out, distinct sessions/tenants
    horizon_ms: float = Field(1200000.0, gt=0)  # state unseen this long is dropped
    queue_windows_ms: tuple[float, ...] = (5000.0, 30000.0)
    eviction_window_ms: float = Field(30000.0, gt=0)
    reorder_tolerance_ms: float = Field(0.0, ge=0)
    session: SessionConfig = SessionConfig()
    ticks: TickConfig = TickConfig()
    labels: LabelConfig = LabelConfig()
    sampling: SamplingConfig = SamplingConfig()

    @model_validator(mode="after")
    def _consistent(self) -> FeatureConfig:
        if self.model not in LLM_PRESETS:
            raise ValueError(f"unknown model {self.model!r}; valid: {sorted(LLM_PRESETS)}")
        for name in ("heat_half_lives_ms", "queue_windows_ms"):
            values = getattr(self, name)
            if not values or any(v <= 0 for v in values) or len(set(values)) != len(values):
                raise ValueError(f"{name} must be distinct positive numbers, got {values}")
            from kvcast.features.spec import duration_tag  # (spec imports this module)

            tags = [duration_tag(v) for v in values]
            if len(set(tags)) != len(tags):  # two windows would name one feature column
                raise ValueError(f"{name} {values} give feature names {tags} that collide")
        if self.distinct_window_ms > self.horizon_ms:
            raise ValueError("distinct_window_ms must not exceed horizon_ms")
        if self.ticks.lookback_ms > self.horizon_ms:
            raise ValueError("ticks.lookback_ms must not exceed horizon_ms (candidates need state)")
        return self

    def digest(self) -> str:
        """A stable hash of every value (stored with datasets and models)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


def load_feature_config(path: str | Path | None = None) -> FeatureConfig:
    """Load a feature config; ``None`` gives the built-in defaults (= ``default.yaml``)."""
    if path is None:
        return FeatureConfig()
    return load_config(FeatureConfig, path)
