"""The promotion gate: a model takes the champion alias only when its test window could judge
it (enough positive rows) and it beats its own recency baseline there; otherwise it is
registered and kept out of the alias, the reason recorded, champion or not."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_training import tiny_config

from kvcast.training.champion import WINDOW, worth_serving
from kvcast.training.data import TrainingData
from kvcast.training.pipeline import run_training


def test_the_gate_names_too_few_positives_then_a_score_not_above_the_baseline(
    tiny_data: dict[str, TrainingData],
) -> None:
    data = tiny_data["sampled"]
    positives = int((data.y[data.rows(WINDOW)] > 0).sum())
    assert positives > 0
    too_few = worth_serving(0.9, 0.1, data, "pr_auc", positives + 1)
    assert too_few == (
        f"test window has {positives} positive rows, under "
        f"tracking.min_test_positives={positives + 1}: too few to judge"
    )
    assert worth_serving(0.1, 0.1, data, "pr_auc", positives) == (
        "test pr_auc 0.1 is not above its recency baseline's 0.1"
    )
    assert "not above" in worth_serving(float("nan"), 0.1, data, "pr_auc", 0)
    assert worth_serving(0.11, 0.1, data, "pr_auc", positives) == ""


def test_a_model_on_too_few_test_positives_is_registered_but_not_the_champion(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """Even with no champion yet: the alias is left unset rather than given to a model its
    test window cannot judge."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-gate",
                "min_test_positives": 10_000, "must_beat_recency": True}  # fmt: skip
    result = run_training(tiny_config("rule", tiny_tables, tmp_path / "out", tracking=tracking))
    assert (result.registered, result.champion) == ("kvcast-gate/1", "kept")
    reason = result.metrics["champion"]["champion.reason"]
    assert reason.startswith("not promoted: test window has ") and "too few to judge" in reason
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)  # this store's registry
    assert client.get_registered_model("kvcast-gate").aliases == {}


def test_train_warns_when_the_model_is_not_above_its_recency_baseline(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    import json

    import yaml
    from typer.testing import CliRunner

    from kvcast.cli.app import app

    cfg = tiny_config("rule", tiny_tables, tmp_path / "out")
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    r = CliRunner().invoke(app, ["train", "--config", str(path), "--no-track"],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    mine, base = m["test"]["pr_auc"], m["test_recency"]["pr_auc"]
    said = "is not above its recency baseline's" in " ".join(r.output.split())
    assert said == (not mine > base), (mine, base, r.output)
    assert not mine > base  # the tiny table's rule model: the case the warning is for


def test_the_baseline_rule_through_the_registry(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """On the tiny table the rule model is below its recency baseline: kept out of the alias
    with must_beat_recency, promoted without it; the recency kind is that baseline and is
    judged on its positives alone."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"

    def train(kind: str, name: str, must: bool) -> tuple[str | None, str | None, str]:
        tracking = {"enabled": True, "tracking_uri": uri, "registered_model": name,
                    "min_test_positives": 0, "must_beat_recency": must}  # fmt: skip
        r = run_training(tiny_config(kind, tiny_tables, tmp_path / name, tracking=tracking))
        return r.registered, r.champion, r.metrics["champion"]["champion.reason"]

    registered, champion, reason = train("rule", "gate-rule", True)
    assert registered == "gate-rule/1"
    assert champion == "kept" and "is not above its recency baseline's" in reason
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)  # this store's registry
    assert client.get_registered_model("gate-rule").aliases == {}
    assert train("rule", "gate-rule-free", False)[1] == "promoted"
    assert train("recency", "gate-recency", True)[1:] == ("promoted", "no champion yet")


def test_two_runs_into_one_folder_stage_apart(tmp_path: Path) -> None:
    from kvcast.training.pipeline import new_stage

    a, b = new_stage(tmp_path), new_stage(tmp_path)
    assert a != b and a.parent == b.parent == tmp_path and a.name.startswith(".partial-")


def test_a_killed_runs_old_staging_folder_is_removed_a_recent_one_kept(tmp_path: Path) -> None:
    import os
    import time

    from kvcast.training.pipeline import STALE_STAGE_S, new_stage

    old, recent = tmp_path / ".partial-old", tmp_path / ".partial-recent"
    for d in (old, recent):
        d.mkdir()
        (d / "model.onnx").write_bytes(b"x")
    then = time.time() - STALE_STAGE_S - 60
    os.utime(old, (then, then))
    stage = new_stage(tmp_path)
    assert not old.exists() and recent.exists() and stage.is_dir()


def test_a_directory_put_in_the_way_during_the_fit_registers_nothing(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch
) -> None:
    """The check made at the start is made again as the model is registered: a directory
    that appeared meanwhile fails the run before the registry moves."""
    from mlflow import MlflowClient

    import kvcast.training.pipeline as pipeline

    out, uri = tmp_path / "out", f"sqlite:///{tmp_path / 'mlruns.db'}"
    real_fit = pipeline.fit_model

    def fit_then_block(cfg, data):  # type: ignore[no-untyped-def]
        fitted = real_fit(cfg, data)
        (out / "metrics.json").mkdir()  # someone's directory, made during the fit
        return fitted

    monkeypatch.setattr(pipeline, "fit_model", fit_then_block)
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "mid"}
    with pytest.raises(IsADirectoryError, match=r"metrics\.json is a directory where the run"):
        run_training(tiny_config("rule", tiny_tables, out, tracking=tracking))
    assert not MlflowClient(tracking_uri=uri, registry_uri=uri).search_registered_models()
    assert not list(out.glob(".partial-*"))
