"""Tiny training settings shared by the training tests (fixtures are in conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcast.training.config import TrainConfig

HEAD_LINES = 500
SPLIT = {"train": 0.6, "validation": 0.2, "test": 0.2, "purge_ms": 10000.0}
TINY_MODELS: dict[str, dict[str, Any]] = {
    "recency": {"kind": "recency", "bins": 8},
    "rule": {"kind": "rule", "grid_points": 8},
    "lgbm": {"kind": "lgbm", "num_boost_round": 12, "min_data_in_leaf": 20, "num_threads": 1},
    "tcn": {
        "kind": "tcn",
        "window": 4,
        "channels": 4,
        "epochs": 1,
        "batch_size": 256,
        "max_train_windows": 3000,
    },
}


def table_for(kind: str) -> str:
    return "full" if kind == "tcn" else "sampled"


def tiny_config(kind: str, tables: dict[str, Path], out: Path, **extra: Any) -> TrainConfig:
    """A train config for ``kind`` on the tiny tables; tracking off unless ``extra`` says, and
    then promoting on the tiny test window's few positives, recency baseline or not (the
    promotion gate has tests of its own: tests/training/test_champion_gate.py)."""
    data: dict[str, Any] = {
        "data": {"features": str(tables[table_for(kind)])},
        "split": SPLIT,
        "model": TINY_MODELS[kind],
        "evaluation": {"budget_k": 16},
        "tracking": {"enabled": False, "min_test_positives": 0, "must_beat_recency": False},
        "out_dir": str(out),
    }
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return TrainConfig.model_validate(data)
