"""Labels: bursts in (t, t+H], time to and node of the next use; weighted negative sampling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.offline.labels import sample_weights
from kvcast.features.offline.pipeline import build_feature_dataset


def _row(df: pd.DataFrame, t: float, block: int) -> pd.Series:
    return df[(df.tick_ms == t) & (df.block == block)].iloc[0]


def test_burst_counts_requests_containing_the_block_in_the_half_open_window(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    # H = 5 s: the request at 5000 is inside (0, 5000], the one at 5001 is not
    events = [make_request(t, [1, 2]) for t in (0.0, 1000.0, 5000.0)]
    events.append(make_request(5001.0, [1], node=3))
    cfg = cfg.model_copy(update={"labels": cfg.labels.model_copy(update={"k": 2})})
    df = build_feature_dataset(events, np.array([0.0, 1000.0]), cfg)
    first, later = _row(df, 0.0, 1), _row(df, 1000.0, 1)
    assert (first.label_count, first.label_burst, first.label_burst_k2) == (2, 1, 1)
    assert (later.label_count, later.label_burst) == (2, 1)
    assert first.label_next_ms == 1000.0 and first.label_next_node == 0
    assert _row(df, 1000.0, 2).label_count == 1 and _row(df, 1000.0, 2).label_burst == 0


def test_the_last_use_has_no_next_time_and_node(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    df = build_feature_dataset([make_request(0.0, [1])], np.array([0.0]), cfg)
    row = _row(df, 0.0, 1)
    assert row.label_count == 0 and np.isnan(row.label_next_ms) and row.label_next_node == -1


def test_negatives_are_kept_at_the_configured_rate_with_inverse_weights() -> None:
    cfg = FeatureConfig(sampling={"negative_keep": 0.2, "seed": 5})
    n = 200_000
    block = np.arange(n, dtype=np.uint64)
    positive = np.arange(n) % 10 == 0
    w = sample_weights(block, np.full(n, 1000.0), positive, cfg)
    assert (w[positive] == 1.0).all()
    kept = w[~positive] > 0
    assert abs(kept.mean() - 0.2) < 0.01 and np.allclose(w[~positive][kept], 5.0)
    assert abs(w[~positive].sum() - (~positive).sum()) / (~positive).sum() < 0.03  # unbiased


def test_sampling_depends_on_block_tick_and_seed_not_on_row_order() -> None:
    cfg = FeatureConfig(sampling={"negative_keep": 0.5})
    block = np.arange(1000, dtype=np.uint64)
    t = np.full(1000, 5000.0)
    neg = np.zeros(1000, dtype=bool)
    w = sample_weights(block, t, neg, cfg)
    perm = np.random.default_rng(0).permutation(1000)
    assert np.array_equal(sample_weights(block[perm], t[perm], neg, cfg), w[perm])
    other = FeatureConfig(sampling={"negative_keep": 0.5, "seed": 1})
    assert not np.array_equal(sample_weights(block, t, neg, other), w)
