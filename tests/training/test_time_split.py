"""Splits are consecutive time windows: ordered, disjoint, purged at the boundaries."""

from __future__ import annotations

import numpy as np
import pytest

from kvcast.config import ConfigError, parse_config
from kvcast.training.config import SplitConfig
from kvcast.training.data import TrainingData
from kvcast.training.splits import time_split


def test_train_validation_test_do_not_overlap_and_are_ordered_in_time(
    tiny_data: dict[str, TrainingData],
) -> None:
    data = tiny_data["sampled"]
    t = data.frame["tick_ms"].to_numpy()
    parts = [data.rows(p) for p in ("train", "validation", "test")]
    assert all(len(p) for p in parts)
    assert not set(parts[0]) & set(parts[1]) and not set(parts[1]) & set(parts[2])
    assert t[parts[0]].max() < t[parts[1]].min() and t[parts[1]].max() < t[parts[2]].min()


def test_rows_whose_label_window_crosses_a_boundary_are_purged() -> None:
    t = np.arange(0.0, 100_000.0, 1000.0)
    s = time_split(t, SplitConfig(train=0.5, validation=0.25, test=0.25, purge_ms=5000.0))
    (_, e1), (_, e2) = s.bounds["train"], s.bounds["validation"]
    assert t[s.rows("train")].max() < e1 - 5000 + 1e-9
    assert t[s.rows("validation")].max() < e2 - 5000 + 1e-9
    assert t[s.rows("test")].min() >= e2 and t[s.rows("test")].max() == t.max()


def test_a_window_left_empty_by_the_purge_is_refused_naming_it_and_the_span_needed() -> None:
    cfg = SplitConfig(purge_ms=5000.0)
    with pytest.raises(ValueError) as err:
        time_split(np.arange(0.0, 10_000.0, 1000.0), cfg)
    msg = str(err.value)
    assert "validation window [" in msg and "is no longer than the purge of 5000 ms" in msg
    start, end = (float(x) for x in msg.split("window [")[1].split(")")[0].split(", "))
    assert start < end  # the window as it is, not [start, end - purge): never inverted
    need = 5000.0 / min(cfg.train, cfg.validation)
    assert f"needs more than {need:.0f} ms: use a longer trace" in msg
    # a window longer than the purge whose ticks all sit elsewhere: no rows
    sparse = np.array([0.0, 1.0, 2.0, 99_998.0, 99_999.0, 100_000.0])
    with pytest.raises(ValueError, match=r"validation window .* has no rows"):
        time_split(sparse, SplitConfig(purge_ms=10.0))


def test_fractions_must_sum_to_one() -> None:
    with pytest.raises(ConfigError, match="must be 1"):
        parse_config(SplitConfig, {"train": 0.5, "validation": 0.2, "test": 0.2})


def test_the_purge_covers_the_label_horizon_the_table_was_made_with() -> None:
    import pandas as pd

    from kvcast.features.config import FeatureConfig
    from kvcast.features.spec import build_spec
    from kvcast.training.data import TrainingData

    h = 60_000.0  # labels look 60 s ahead; the split's own purge_ms is only 5 s
    fcfg = FeatureConfig.model_validate({"labels": {"horizon_ms": h}})
    spec = build_spec(fcfg)
    t = np.arange(0.0, 1_000_000.0, 1000.0)
    df = pd.DataFrame({name: 0.0 for name in spec.names} | {"tick_ms": t, "label_burst": 0})
    info = {"feature_config": fcfg.model_dump_json()}
    data = TrainingData.build(df, spec, SplitConfig(purge_ms=5000.0), info=info)
    e1, e2 = data.split.bounds["validation"][0], data.split.bounds["test"][0]
    assert t[data.rows("train")].max() + h < e1 and t[data.rows("validation")].max() + h < e2
    assert data.split.purge_ms == h  # as applied: what the tracked run records
    with pytest.raises(ValueError, match="unknown label 'tick_ms'"):  # only label columns
        TrainingData.build(df, spec, SplitConfig(), label="tick_ms", info=info)
