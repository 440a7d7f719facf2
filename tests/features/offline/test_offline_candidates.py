"""Ticks and candidates: blocks requested within the lookback, no censored ticks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvcast.features.config import FeatureConfig, TickConfig
from kvcast.features.events import RequestArrived, TelemetrySample
from kvcast.features.offline.pipeline import build_feature_dataset


def test_a_block_is_a_candidate_from_its_request_until_the_lookback_passes(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    events = [make_request(500.0, [1]), make_request(20000.0, [2])]
    df = build_feature_dataset(events, np.arange(0.0, 21000.0, 1000.0), cfg)
    ticks = df[df.block == 1].tick_ms.tolist()
    assert ticks == [float(t) for t in range(1000, 11000, 1000)]  # 500 + 10000 lookback


def test_ticks_stop_where_the_label_window_would_run_past_the_stream(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    cfg = cfg.model_copy(update={"labels": cfg.labels.model_copy(update={"drop_censored": True})})
    events = [make_request(t, [1]) for t in (0.0, 4000.0, 9000.0)]
    df = build_feature_dataset(events, None, cfg)
    assert df.tick_ms.max() == 4000.0  # last event 9000 - H 5000


def test_rows_are_grouped_by_block_with_ticks_ascending(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    events = [make_request(t, [9 - int(t // 1000), 100]) for t in range(0, 5000, 1000)]
    df = build_feature_dataset([e for e in events], None, cfg)
    keys = list(zip(df.block, df.tick_ms, strict=True))
    assert keys == sorted(keys) and len(keys) > 5


def test_a_tick_config_sets_the_grid_instead_of_explicit_times(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    events = [make_request(t, [1]) for t in (0.0, 4000.0)]
    ticks = TickConfig(period_ms=2000.0, start_ms=1000.0, lookback_ms=10000.0)
    df = build_feature_dataset(events, ticks, cfg)
    assert sorted(set(df.tick_ms)) == [1000.0, 3000.0]


def test_ticks_stop_where_the_label_window_would_run_past_the_last_request(
    cfg: FeatureConfig,
    make_request: Callable[..., RequestArrived],
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    """Events after the last arrival (a replay's drain: telemetry, stores, removals) cannot
    show a request: a tick whose (t, t+H] runs past the last request is censored too."""
    cfg = cfg.model_copy(update={"labels": cfg.labels.model_copy(update={"drop_censored": True})})
    events = [make_request(t, [1]) for t in (0.0, 4000.0, 9000.0)]
    events += [make_telemetry(t, 0) for t in (10000.0, 15000.0, 20000.0)]
    df = build_feature_dataset(events, None, cfg)
    assert df.tick_ms.max() == 4000.0  # last request 9000 - H 5000, not last event 20000 - H
