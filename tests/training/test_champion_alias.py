"""The champion alias moves only when a new model beats it on the same test window, the rows
neither model fitted, stopped or calibrated on."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from tiny_training import SPLIT, TINY_MODELS, tiny_config

from kvcast.predictor.model_meta import ModelFormatError
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.config import SplitConfig
from kvcast.training.data import TrainingData
from kvcast.training.evaluate import metrics_of
from kvcast.training.pipeline import run_training
from kvcast.training.registry import model_kind


def test_a_worse_second_run_keeps_the_champion_alias(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-test"}
    first = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "a", tracking=tracking))
    # the configured store is this run's: it does not leak into the environment, where a
    # later run without one would take it for its default (mlflow's setters write it)
    assert "MLFLOW_TRACKING_URI" not in os.environ
    worse = {"kind": "recency", "bins": 1}  # one bin: a constant, it ranks nothing
    second = run_training(
        tiny_config("recency", tiny_tables, tmp_path / "b", tracking=tracking, model=worse)
    )
    assert first.champion == "promoted" and first.registered == "kvcast-test/1"
    assert second.registered == "kvcast-test/2" and second.champion == "kept"
    assert second.metrics["test"]["pr_auc"] < first.metrics["test"]["pr_auc"]
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias("kvcast-test", "champion").version) == "1"
    tags = client.get_run(second.run_id).data.tags
    assert tags["champion.decision"] == "kept" and tags["champion.previous_version"] == "1"
    assert "<= champion" in tags["champion.reason"]  # compared, in the configured store
    assert client.get_run(first.run_id).data.tags["champion.decision"] == "promoted"
    run = client.get_run(first.run_id)
    assert {"validation_pr_auc", "test_ece", "test_ece_quantile"} <= set(run.data.metrics)
    assert "feature_spec.json" in {a.path for a in client.list_artifacts(first.run_id)}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert OnnxScorer.load("models:/kvcast-test@champion").kind == "lgbm"
    assert OnnxScorer.load("models:/kvcast-test/2").kind == "recency"
    with pytest.raises(ModelFormatError, match=r"models:/nope@champion: .*not found"):
        OnnxScorer.load("models:/nope@champion")


def test_the_alias_never_moves_to_a_model_trained_for_another_label(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-lbl"}
    worse = {"kind": "recency", "bins": 1}  # a constant: it ranks nothing
    first = run_training(
        tiny_config("recency", tiny_tables, tmp_path / "a", tracking=tracking, model=worse)
    )
    other = run_training(
        tiny_config(
            "rule", tiny_tables, tmp_path / "b", tracking=tracking, data={"label": "label_burst_k2"}
        )
    )
    assert first.champion == "promoted" and other.champion == "kept"
    tags = MlflowClient(uri).get_run(other.run_id).data.tags
    assert "trained on 'label_burst', this run on 'label_burst_k2'" in tags["champion.reason"]


def test_a_store_error_reading_the_alias_never_moves_it(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A locked store while the champion is read is not "no champion yet": the alias stays
    (the run is refused with the store's error, its model kept on disk)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-lk"}
    first = run_training(tiny_config("rule", tiny_tables, tmp_path / "a", tracking=tracking))
    assert first.champion == "promoted"

    def locked(self: object, name: str, alias: str) -> None:
        raise MlflowException("(sqlite3.OperationalError) database is locked",
                              error_code=TEMPORARILY_UNAVAILABLE)  # fmt: skip

    monkeypatch.setattr(MlflowClient, "get_model_version_by_alias", locked)
    worse = {"kind": "recency", "bins": 1}  # a constant: it ranks nothing
    cfg = tiny_config("recency", tiny_tables, tmp_path / "b", tracking=tracking, model=worse)
    with pytest.raises(OSError, match="database is locked"):
        run_training(cfg)
    assert (tmp_path / "b" / "model.onnx").is_file()
    monkeypatch.undo()
    assert str(MlflowClient(uri).get_model_version_by_alias("kvcast-lk", "champion").version) == "1"


def test_the_champion_compared_is_the_version_read_even_if_the_alias_moves_meanwhile(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another trainer moves the alias right after this run has read it: the run compares
    with (and records) the version it read, not whatever the alias names by then."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-race"}
    first = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "a", tracking=tracking))
    worse = {"kind": "recency", "bins": 1}  # a constant: it ranks nothing, lgbm does
    second = run_training(
        tiny_config("recency", tiny_tables, tmp_path / "b", tracking=tracking, model=worse)
    )
    assert (first.champion, second.champion) == ("promoted", "kept")
    real, moved = MlflowClient.get_model_version_by_alias, []

    def read_then_moved(self: MlflowClient, name: str, alias: str) -> object:
        version = real(self, name, alias)
        if not moved:  # the other trainer promotes version 2 just after this read
            MlflowClient(uri, uri).set_registered_model_alias(name, alias, "2")
            moved.append(alias)
        return version

    monkeypatch.setattr(MlflowClient, "get_model_version_by_alias", read_then_moved)
    third = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "c", tracking=tracking))
    assert moved
    tags = MlflowClient(uri).get_run(third.run_id).data.tags
    assert tags["champion.previous_version"] == "1"
    champion_score = f"{first.metrics['test']['pr_auc']:.6g}"
    assert tags["champion.previous_test_pr_auc"] == champion_score  # version 1's, not 2's
    assert third.champion == "kept" and "<= champion" in tags["champion.reason"]  # a tie


def _relabelled(base: TrainingData, by_part: dict[str, np.ndarray]) -> TrainingData:
    """``base`` with the rows of each part labelled positive where its scores reach their 80th
    percentile (ties included: every row tied with a positive is positive)."""
    y = base.frame["label_burst"].to_numpy().copy()
    for part, scores in by_part.items():
        idx = base.rows(part)
        y[idx] = scores[idx] >= np.quantile(scores[idx], 0.8)
    frame = base.frame.assign(label_burst=y)
    return TrainingData.build(frame, base.spec, SplitConfig(**SPLIT), info=base.info)


def test_a_challenger_that_wins_only_on_the_window_it_tuned_on_keeps_the_champion(
    tiny_tables: dict[str, Path], tiny_data: dict[str, TrainingData], tmp_path: Path
) -> None:
    """Validation labels follow the challenger's ranking, test labels the champion's: the
    challenger, calibrated on validation, beats the champion there; on the test window,
    which neither model fitted, stopped or calibrated on, it does not. Compared on
    validation (the old rule), it took the alias."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-held"}
    first = run_training(tiny_config("recency", tiny_tables, tmp_path / "a", tracking=tracking))
    assert first.champion == "promoted"
    base = tiny_data["sampled"]
    champion = OnnxScorer.load(first.model_path)
    rule = model_kind("rule")  # fitted on the training window only: its ranking is fixed there
    challenger = rule.fit(base, rule.params(**TINY_MODELS["rule"]), 0)
    data = _relabelled(
        base, {"validation": challenger.predict_raw(base.x), "test": champion.score(base.x)}
    )
    second = run_training(
        tiny_config("rule", tiny_tables, tmp_path / "b", tracking=tracking), data=data
    )
    held = {}
    for part in ("validation", "test"):
        idx = data.rows(part)
        p = champion.score(data.x[idx])
        held[part] = metrics_of(p, data.frame, idx, data.y, data.w, 16, 15)["pr_auc"]
    assert second.metrics["validation"]["pr_auc"] > held["validation"]  # the tuned-on window
    assert second.metrics["test"]["pr_auc"] < held["test"]  # the window neither tuned on
    assert second.champion == "kept"
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias("kvcast-held", "champion").version) == "1"
    tags = client.get_run(second.run_id).data.tags
    lo, hi = data.split.bounds["test"]
    assert (
        tags["champion.window"] == "test" and tags["champion.window_ms"] == f"[{lo:.0f}, {hi:.0f})"
    )
    assert tags["champion.previous_test_pr_auc"] == f"{held['test']:.6g}"
    assert tags["test_pr_auc"] == f"{second.metrics['test']['pr_auc']:.6g}"
    assert (
        tags["champion.reason"].startswith("test pr_auc ")
        and "<= champion" in tags["champion.reason"]
    )


def test_a_champion_fitted_on_this_runs_test_window_is_not_compared(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """A champion trained on the same trace with a later split has fitted and tuned on ticks
    this run's test window holds: its score there would be optimistic, so it is kept and the
    reason recorded (moving the alias is then a manual act)."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-late"}
    late = {"train": 0.7, "validation": 0.2, "test": 0.1, "purge_ms": SPLIT["purge_ms"]}
    worse = {"kind": "recency", "bins": 1}  # a constant: lgbm beats it on every window here
    first = run_training(
        tiny_config("recency", tiny_tables, tmp_path / "a", tracking=tracking, model=worse,
                    split=late)
    )  # fmt: skip
    second = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "b", tracking=tracking))
    assert (first.champion, second.champion) == ("promoted", "kept")
    tags = MlflowClient(uri).get_run(second.run_id).data.tags
    assert tags["champion.reason"].startswith("champion not comparable: it was fitted or tuned")
    assert "test window" in tags["champion.reason"]
