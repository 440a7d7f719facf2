"""The champion alias moves only when a new model beats it on the same validation window."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tiny_training import tiny_config

from kvcast.predictor.model_meta import ModelFormatError
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.pipeline import run_training


def test_a_worse_second_run_keeps_the_champion_alias(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-test"}
    first = run_training(tiny_config("rule", tiny_tables, tmp_path / "a", tracking=tracking))
    # the configured store is this run's: it does not leak into the environment, where a
    # later run without one would take it for its default (mlflow's setters write it)
    assert "MLFLOW_TRACKING_URI" not in os.environ
    worse = {"kind": "recency", "bins": 1}  # one bin: a constant, the weakest possible ranking
    second = run_training(
        tiny_config("recency", tiny_tables, tmp_path / "b", tracking=tracking, model=worse)
    )
    assert first.champion == "promoted" and first.registered == "kvcast-test/1"
    assert second.registered == "kvcast-test/2" and second.champion == "kept"
    assert second.metrics["validation"]["pr_auc"] < first.metrics["validation"]["pr_auc"]
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias("kvcast-test", "champion").version) == "1"
    tags = client.get_run(second.run_id).data.tags
    assert tags["champion.decision"] == "kept" and tags["champion.previous_version"] == "1"
    assert "<= champion" in tags["champion.reason"]  # compared, in the configured store
    assert client.get_run(first.run_id).data.tags["champion.decision"] == "promoted"
    run = client.get_run(first.run_id)
    assert {"validation_pr_auc", "test_ece"} <= set(run.data.metrics)
    assert "feature_spec.json" in {a.path for a in client.list_artifacts(first.run_id)}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert OnnxScorer.load("models:/kvcast-test@champion").kind == "rule"
    assert OnnxScorer.load("models:/kvcast-test/2").kind == "recency"
    with pytest.raises(ModelFormatError, match=r"models:/nope@champion: .*not found"):
        OnnxScorer.load("models:/nope@champion")


def test_the_alias_never_moves_to_a_model_trained_for_another_label(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-lbl"}
    worse = {"kind": "recency", "bins": 1}  # a constant: any real model beats it on any label
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
    worse = {"kind": "recency", "bins": 1}  # a constant: the weakest possible ranking
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
    first = run_training(tiny_config("rule", tiny_tables, tmp_path / "a", tracking=tracking))
    worse = {"kind": "recency", "bins": 1}  # a constant: the weakest possible ranking
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
    third = run_training(tiny_config("rule", tiny_tables, tmp_path / "c", tracking=tracking))
    assert moved
    tags = MlflowClient(uri).get_run(third.run_id).data.tags
    assert tags["champion.previous_version"] == "1"
    champion_score = f"{first.metrics['validation']['pr_auc']:.6g}"
    assert tags["champion.previous_val_pr_auc"] == champion_score  # version 1's, not 2's
    assert third.champion == "kept" and "<= champion" in tags["champion.reason"]  # a tie
