"""``kvcast score``: evaluate any exported model on any trace, beside the recency baseline.

The trace is replayed into features with the feature config stored in the model (every
candidate row kept: no negative sampling, so metrics need no weights and sequence models get
their full history), the spec is checked against the model's, and every metric is computed
for the model and for the recency baseline the model carries (fitted on its training window).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.predictor.recency_table import FEATURE
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.data import feature_matrix, replay_features
from kvcast.training.evaluate import metrics_of, predict_rows


def model_feature_config(scorer: OnnxScorer) -> FeatureConfig:
    """The model's feature config (defaults if it has none), with every candidate kept."""
    fcfg = scorer.meta.feature_config or FeatureConfig()
    sampling = fcfg.sampling.model_copy(update={"negative_keep": 1.0})
    return fcfg.model_copy(update={"sampling": sampling})


def score_trace(
    scorer: OnnxScorer,
    trace: str,
    *,
    fmt: str = "auto",
    skip_bad: bool = False,
    simulator_config: Path | None = None,
    policy: str = "dynamo_kv",
    time_scale: float = 1.0,
    budget_k: int = 64,
    ece_bins: int = 15,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    df, spec, info = replay_features(
        trace,
        model_feature_config(scorer),
        fmt=fmt,
        skip_bad=skip_bad,
        simulator_config=simulator_config,
        policy=policy,
        time_scale=time_scale,
        progress=progress,
    )
    scorer.check_spec(spec)
    if len(df) == 0:
        raise ValueError(
            f"{trace}: the replay gave no block to score (too few requests or too short a trace "
            "for one decision tick with a label window after it)"
        )
    label = scorer.meta.extra.get("label", "label_burst")
    x = feature_matrix(df, spec)
    y = (df[label].to_numpy() > 0).astype("int8")
    w = df["weight"].to_numpy("float64")
    idx = np.arange(len(df))
    windows = None
    if scorer.window:
        from kvcast.predictor.windows import window_index

        windows = window_index(df["block"].to_numpy(), df["tick_ms"].to_numpy(), scorer.window)
    p = predict_rows(scorer.score, x, idx, scorer.window, windows)
    out: dict[str, Any] = {
        "kind": scorer.kind,
        "trace": trace,
        "trace_hash": info["trace_hash"],
        "label": label,
        "budget_k": budget_k,
        "rows": len(df),
        "positives": int(y.sum()),
        "model": metrics_of(p, df, idx, y, w, budget_k, ece_bins),
    }
    if scorer.meta.baseline is not None:
        base = scorer.meta.baseline.predict(x[:, spec.index(FEATURE)])
        out["recency"] = metrics_of(base, df, idx, y, w, budget_k, ece_bins)
    return out
