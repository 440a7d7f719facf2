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


def test_a_trailing_partial_block_is_no_candidate_and_ends_its_blocks_rows(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    """Engines never reuse a request's trailing partial block: it has no rows (offline and
    online alike, see the parity tests), while the request's full blocks do. A block that a
    later request names as its partial block stops being a candidate there (its last
    access), and one that a still later request names in full is again."""
    events = [
        make_request(500.0, [1, 2, 3], input_tokens=2 * 512 + 100),  # 3 partial
        make_request(3500.0, [4, 5], input_tokens=0),  # no token count: 5 taken as partial
        make_request(4500.0, [1], input_tokens=100),  # 1 named as a partial block
        make_request(6500.0, [1, 7], input_tokens=2 * 512),
    ]
    df = build_feature_dataset(events, np.arange(0.0, 9000.0, 1000.0), cfg)
    ticks = {b: df[df.block == b].tick_ms.tolist() for b in range(1, 8)}
    assert ticks[3] == [] and ticks[5] == []
    assert ticks[2] == [float(t) for t in range(1000, 9000, 1000)]
    assert ticks[4] == [4000.0, 5000.0, 6000.0, 7000.0, 8000.0]
    assert ticks[1] == [1000.0, 2000.0, 3000.0, 4000.0, 7000.0, 8000.0]  # none at 5000, 6000
    assert (df[df.block != 4].block_tokens == 512).all()  # (4: no token count)
