"""The dataset on disk carries its spec and hashes; the summary is what the CLI prints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvcast.features.config import FeatureConfig
from kvcast.features.dataset import (
    file_hash,
    read_feature_dataset,
    summarise,
    write_feature_dataset,
)
from kvcast.features.events import RequestArrived
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.spec import build_spec


def _dataset(cfg: FeatureConfig, make_request: Callable[..., RequestArrived]) -> pd.DataFrame:
    events = [make_request(float(t), [1, 2 + t // 3000]) for t in range(0, 12000, 1000)]
    return build_feature_dataset(events, None, cfg)


def test_parquet_round_trip_keeps_rows_spec_and_hashes(
    tmp_path: Path, cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    df = _dataset(cfg, make_request)
    spec = build_spec(cfg)
    path = write_feature_dataset(df, tmp_path / "out", spec, "abc123", cfg.digest())
    back, back_spec, info = read_feature_dataset(path.parent)
    assert back_spec == spec and info == {"trace_hash": "abc123", "config_hash": cfg.digest()}
    assert back.equals(df)
    assert back["block"].dtype == np.uint64


def test_the_feature_config_given_is_recorded_and_read_back(
    tmp_path: Path, cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    df = _dataset(cfg, make_request)
    path = write_feature_dataset(df, tmp_path, build_spec(cfg), "t", cfg.digest(), cfg)
    _, _, info = read_feature_dataset(path)
    assert FeatureConfig.model_validate_json(info["feature_config"]) == cfg


def test_a_missing_dataset_is_refused_naming_the_file_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope: no such feature dataset"):
        read_feature_dataset(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"features\.parquet: no such feature dataset"):
        read_feature_dataset(tmp_path)  # a folder without the table
    trace = tmp_path / "trace.jsonl"  # a trace given to train --features
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
    with pytest.raises(ValueError, match=r"trace\.jsonl: not a Parquet feature dataset .* --trace"):
        read_feature_dataset(trace)


def test_writing_refuses_a_frame_without_the_spec_features(
    tmp_path: Path, cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    df = _dataset(cfg, make_request).drop(columns=["heat_1s"])
    with pytest.raises(ValueError, match="heat_1s"):
        write_feature_dataset(df, tmp_path, build_spec(cfg), "t", "c")


def test_summary_reports_rows_positive_rates_and_null_rate_per_feature(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    df = _dataset(cfg, make_request)
    s = summarise(df, build_spec(cfg))
    assert s["rows"] == len(df) and 0 < s["positives_rate"] <= 1
    assert s["positives"] == int((df.label_burst > 0).sum())
    assert set(s["null_rate"]) == set(build_spec(cfg).names)
    assert s["null_rate"]["heat_1s"] == 0.0 and s["null_rate"]["node_queue_len"] == 1.0
    assert s["bad_input"]["unknown_node"] == 0


def test_file_hash_changes_with_the_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x")
    b.write_text("y")
    assert file_hash(a) != file_hash(b) and len(file_hash(a)) == 16
