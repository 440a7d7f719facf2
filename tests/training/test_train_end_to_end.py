"""train.py trains every kind end to end on tiny data: ONNX, metrics, plots, model card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_training import SPLIT, TINY_MODELS, table_for

from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.config import PARITY_TOLERANCE
from kvcast.training.evaluate import METRICS
from kvcast.training.train import main

ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = (
    "model.onnx",
    "metrics.json",
    "model_card.md",
    "pr_curve.png",
    "reliability.png",
    "feature_importance.png",
)


def write_config(kind: str, tables: dict[str, Path], path: Path) -> Path:
    cfg = {
        "data": {"features": str(tables[table_for(kind)])},
        "split": SPLIT,
        "model": TINY_MODELS[kind],
        "evaluation": {"budget_k": 16},
        "out_dir": str(path.parent / "out"),
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("kind", ["recency", "rule", "lgbm", "tcn"])
def test_train_py_writes_a_scorable_model_and_every_test_metric(
    kind: str, tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    config = write_config(kind, tiny_tables, tmp_path / "train.yaml")
    assert main(["--config", str(config), "--no-track"]) == 0
    out = tmp_path / "out"
    assert all((out / name).is_file() for name in ARTEFACTS)
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(METRICS) <= set(metrics["test"]) and set(METRICS) <= set(metrics["test_recency"])
    assert metrics["onnx_parity_max_abs"] <= 1e-5  # native vs ONNX on the test window
    assert metrics["onnx_parity_tolerance"] == PARITY_TOLERANCE[kind]  # held to, and recorded
    scorer = OnnxScorer.load(out / "model.onnx")
    assert scorer.kind == kind and scorer.meta.baseline is not None
    card = (out / "model_card.md").read_text()
    assert "## Metrics" in card and f"(tolerance {PARITY_TOLERANCE[kind]:.3g})" in card


def test_train_py_runs_as_a_script_and_reports_bad_config_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  kind: forest\n")
    r = subprocess.run(
        [sys.executable, str(ROOT / "training" / "train.py"), "--config", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert "model" in r.stderr and "forest" in r.stderr and "Traceback" not in r.stderr


def test_a_sequence_model_refuses_a_sampled_table(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    config = write_config("tcn", {"full": tiny_tables["sampled"]}, tmp_path / "train.yaml")
    from typer.testing import CliRunner

    from kvcast.cli.app import app

    r = CliRunner().invoke(app, ["train", "--config", str(config), "--no-track"])
    assert r.exit_code == 2 and "unsampled" in r.output


@pytest.mark.parametrize(
    ("section", "data", "needle"),
    [
        ("model", {"kind": "lgbm", "class_weight": -2.0}, "class_weight"),
        ("model", {"kind": "lgbm", "class_weight": 0}, "class_weight"),
        ("tracking", {"champion_alias": "latest"}, "reserved by MLflow"),
        ("tracking", {"champion_alias": "v3"}, "reserved by MLflow"),
        ("tracking", {"champion_alias": ""}, "champion_alias"),
    ],
)
def test_values_that_would_fail_only_after_training_are_refused_up_front(
    section: str, data: dict, needle: str
) -> None:
    from kvcast.config import ConfigError, parse_config
    from kvcast.training.config import TrainConfig

    with pytest.raises(ConfigError, match=needle):
        parse_config(TrainConfig, {section: data})


def test_a_tracked_run_logs_its_own_artefacts_not_the_rest_of_its_output_folder(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """``--out .`` beside the store (or a features folder, or any folder in use) gave MLflow
    every file there: the store copied itself into its own artefacts until the path was too
    long, the run failed and the trace and the database went up with it."""
    from mlflow import MlflowClient
    from tiny_training import tiny_config

    from kvcast.training.pipeline import run_training

    (tmp_path / "notes.txt").write_text("not a training artefact\n")
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"  # sqlite: artefacts in mlruns/ beside it
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-own"}
    result = run_training(tiny_config("rule", tiny_tables, tmp_path, tracking=tracking))
    logged = {a.path for a in MlflowClient(uri).list_artifacts(result.run_id)}
    assert logged == {*ARTEFACTS, "feature_spec.json"}


def test_a_tracked_run_records_the_purge_it_applied_not_only_the_one_configured(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """A table made with a 15 s label horizon raises the split's 10 s purge to 15 s: the run's
    parameters say 15 s, the purge its windows were cut with."""
    from mlflow import MlflowClient
    from tiny_training import tiny_config

    from kvcast.features.config import FeatureConfig
    from kvcast.training.data import TrainingData
    from kvcast.training.pipeline import load_data, run_training

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-purge"}
    cfg = tiny_config("rule", tiny_tables, tmp_path, tracking=tracking)
    loaded = load_data(cfg)
    made_with = FeatureConfig.model_validate({"labels": {"horizon_ms": 15_000.0}})
    horizon = made_with.labels.horizon_ms
    assert cfg.split.purge_ms < horizon
    info = loaded.info | {"feature_config": made_with.model_dump_json()}
    data = TrainingData.build(loaded.frame, loaded.spec, cfg.split, info=info)
    result = run_training(cfg, data=data)
    params = MlflowClient(uri).get_run(result.run_id).data.params
    assert float(params["split.purge_ms"]) == horizon
