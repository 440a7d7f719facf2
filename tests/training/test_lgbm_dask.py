"""LightGBM on a Dask cluster (``distributed.engine: dask``) scores like the local fit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_training import TINY_MODELS, tiny_config

from kvcast.config import ConfigError
from kvcast.data import bundled_trace_path
from kvcast.features import build_feature_dataset, build_spec, write_feature_dataset
from kvcast.features.config import FeatureConfig
from kvcast.features.dask_client import dask_client
from kvcast.features.traces import Trace, load_trace
from kvcast.features.traces.synthesize import synthesize
from kvcast.features.traces.table import make_table
from kvcast.simulator.config import SimConfig
from kvcast.simulator.recording import feature_config_for, record_events
from kvcast.training.config import DistributedConfig, SplitConfig, TrainConfig, load_train_config
from kvcast.training.data import TrainingData
from kvcast.training.models.lgbm_dask import fit_on_dask
from kvcast.training.models.params import LgbmParams
from kvcast.training.pipeline import run_training

# each worker finds the bins of some features from its own chunk (which worker gets which
# chunk varies run to run): models differ a little; measured gaps were below 0.015
TOLERANCE = 0.03
DASK = {"engine": "dask", "scheduler": "local", "workers": 2}
# row and feature subsampling draw differently per worker by construction: off, so that the
# comparison measures the distributed learner itself (each worker bins its own chunk)
MODEL = TINY_MODELS["lgbm"] | {"bagging_fraction": 1.0, "bagging_freq": 0, "feature_fraction": 1.0}


@pytest.fixture(scope="module")
def sample_table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled conversation sample's sessions replayed 3 times (30 minutes): the tiny
    165 s table is too noisy for two models' metrics to mean anything (its test ROC AUC is
    below 0.5); this test window holds about 4,000 positives."""
    src = load_trace(bundled_trace_path("conversation"))
    r = synthesize(src.requests, 3)
    table = make_table(
        arrival_ms=r["arrival_ms"].to_numpy(),
        input_tokens=r["input_tokens"].to_numpy(),
        output_tokens=r["output_tokens"].to_numpy(),
        block_hashes=list(r["block_hashes"]),
    )
    trace, sim = Trace(table, "conversation-x3", src.block_size), SimConfig()
    fcfg = feature_config_for(sim, trace, FeatureConfig())
    df = build_feature_dataset(record_events(trace, sim), fcfg.ticks, fcfg)
    folder = tmp_path_factory.mktemp("sample_features")
    write_feature_dataset(df, folder, build_spec(fcfg), "sample-x3", fcfg.digest())
    return {"sampled": folder / "features.parquet"}


@pytest.mark.slow  # two fits, a cluster start and MLflow: about 25 s on 2 cores
def test_lgbm_on_two_dask_workers_matches_the_local_model_and_is_tracked(
    sample_table: dict[str, Path], tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    local = run_training(tiny_config("lgbm", sample_table, tmp_path / "local", model=MODEL))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-dask"}
    cfg = tiny_config(
        "lgbm", sample_table, tmp_path / "dask", model=MODEL, tracking=tracking, distributed=DASK
    )
    dask = run_training(cfg)
    # the reported metrics (test window), and the validation Brier score; the validation
    # window's ranking metrics are read after the isotonic fit on that same window, whose
    # plateaus (ties) make them jump by several points between near-equal models
    for part, metric in (
        *(("test", m) for m in ("roc_auc", "pr_auc", "brier")),
        ("validation", "brier"),
    ):
        a, b = local.metrics[part][metric], dask.metrics[part][metric]
        assert abs(a - b) <= TOLERANCE, (part, metric, a, b)
    assert dask.metrics["onnx_parity_max_abs"] < 1e-4
    run = MlflowClient(uri).get_run(dask.run_id)
    assert run.data.params["distributed.engine"] == "dask"
    assert run.data.params["fitted.engine"] == "lightgbm.dask (2 workers)"
    assert {"test_pr_auc", "validation_roc_auc"} <= set(run.data.metrics)
    assert dask.registered == "kvcast-dask/1"


def test_a_training_window_shorter_than_two_rows_per_worker_fits_on_fewer_workers() -> None:
    """3 training rows on 2 workers: one worker would get 1 row, which LightGBM refuses there;
    the local fit trains on them, and so must the Dask fit (on one worker)."""
    spec = build_spec(FeatureConfig())
    rng = np.random.default_rng(0)
    df = pd.DataFrame({name: rng.random(6) for name in spec.names})
    df["tick_ms"], df["block"] = 1000.0 * np.arange(6), np.arange(6)
    df["label_burst"] = [0, 1, 0, 1, 0, 1]
    split = SplitConfig(train=0.6, validation=0.2, test=0.2, purge_ms=0.0)
    data = TrainingData.build(df, spec, split)
    assert len(data.rows("train")) == 3
    params = LgbmParams(num_boost_round=3, min_data_in_leaf=1, num_threads=1)
    with dask_client("local", 2) as client:
        model = fit_on_dask(data, params, 0, client)
    assert model.info["engine"] == "lightgbm.dask (1 worker)"


@pytest.mark.parametrize(
    ("distributed", "named"),
    [
        ({"devices": 4, "num_nodes": 2}, "devices=4 and num_nodes=2 take effect with strategy"),
        ({"scheduler": "tcp://h:8786"}, "scheduler='tcp://h:8786' and workers=2 take effect"),
        ({"engine": "dask", "scheduler": "tcp://h:8786", "workers": 8}, "workers=8 sizes a new"),
    ],
)
def test_a_distributed_setting_its_engine_would_ignore_is_refused(
    distributed: dict, named: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        DistributedConfig.model_validate(distributed)


def test_dask_engine_and_ddp_strategy_are_refused_for_other_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="engine: dask trains lgbm only, not tcn"):
        TrainConfig.model_validate({"model": {"kind": "tcn"}, "distributed": DASK})
    with pytest.raises(ValueError, match="strategy: ddp trains tcn only, not lgbm"):
        TrainConfig.model_validate({"distributed": {"strategy": "ddp", "devices": 2}})
    bad = tmp_path / "t.yaml"
    bad.write_text("distributed:\n  engine: spark\n")
    with pytest.raises(ConfigError, match=r"distributed\.engine"):
        load_train_config(bad)
