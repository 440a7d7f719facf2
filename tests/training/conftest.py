"""Tiny training data shared by the training tests: the first minutes of the bundled sample.

Built once per session: one replay of the first 500 requests (~165 s of traffic), two feature
tables (negatives sampled at 0.25, and every candidate kept for sequence models), and one
small fitted model of each kind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_training import HEAD_LINES, SPLIT, TINY_MODELS, table_for

from kvcast.data import bundled_trace_path
from kvcast.features import build_feature_dataset, build_spec, write_feature_dataset
from kvcast.features.config import FeatureConfig
from kvcast.features.dataset import file_hash
from kvcast.features.traces import load_trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.recording import feature_config_for, record_events
from kvcast.training.config import SplitConfig, TrainConfig
from kvcast.training.data import TrainingData, load_frame
from kvcast.training.registry import FittedModel, model_kind


@pytest.fixture(scope="session")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = bundled_trace_path("conversation").read_text().splitlines(keepends=True)
    path = tmp_path_factory.mktemp("trace") / "head.jsonl"
    path.write_text("".join(src[:HEAD_LINES]))
    return path


@pytest.fixture(scope="session")
def tiny_tables(tiny_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    trace, sim = load_trace(tiny_trace), SimConfig()
    events = record_events(trace, sim, "dynamo_kv")
    out = {}
    for name, keep in (("sampled", 0.25), ("full", 1.0)):
        fcfg = feature_config_for(sim, trace, FeatureConfig(sampling={"negative_keep": keep}))
        df = build_feature_dataset(events, fcfg.ticks, fcfg)
        folder = tmp_path_factory.mktemp(f"features_{name}")
        write_feature_dataset(df, folder, build_spec(fcfg), file_hash(tiny_trace), fcfg.digest())
        out[name] = folder / "features.parquet"
    return out


@pytest.fixture(scope="session")
def tiny_data(tiny_tables: dict[str, Path]) -> dict[str, TrainingData]:
    out = {}
    for name, path in tiny_tables.items():
        cfg = TrainConfig.model_validate({"data": {"features": str(path)}, "split": SPLIT})
        df, spec, info = load_frame(cfg.data)
        out[name] = TrainingData.build(df, spec, SplitConfig(**SPLIT), info=info)
    return out


@pytest.fixture(scope="session")
def fitted(tiny_data: dict[str, TrainingData]) -> Callable[[str], FittedModel]:
    """``fitted(kind)``: a small fitted model of that kind (fitted once per session)."""
    cache: dict[str, FittedModel] = {}

    def get(kind: str) -> FittedModel:
        if kind not in cache:
            entry = model_kind(kind)
            params = entry.params(**TINY_MODELS[kind])
            cache[kind] = entry.fit(tiny_data[table_for(kind)], params, 0)
        return cache[kind]

    return get
