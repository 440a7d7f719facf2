"""Runs that cannot give a meaningful model stop up front, in one line, leaving no model file;
the defaults of each kind train as they are; the recency kind is reported beside its baseline
under two names."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml
from tiny_training import SPLIT, TINY_MODELS, tiny_config
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.cli.train import train_config
from kvcast.config import ConfigError, parse_config
from kvcast.training.config import TrainConfig
from kvcast.training.data import TrainingData
from kvcast.training.export import ParityError
from kvcast.training.pipeline import run_training

runner = CliRunner()


@pytest.mark.parametrize("part", ["train", "validation", "test"])
def test_a_window_without_positives_is_refused_before_a_model_is_written(
    part: str, tiny_data: dict[str, TrainingData], tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """A label with no positives in a window trains a constant (and, tracked, registered it
    as champion with a NaN validation metric): refused naming the window and the label."""
    data = tiny_data["sampled"]
    y = data.y.copy()
    y[data.rows(part)] = 0
    empty = dataclasses.replace(data, y=y)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"the {part} window .* no positive rows of label_burst"):
        run_training(tiny_config("lgbm", tiny_tables, out), data=empty)
    assert not (out / "model.onnx").exists()


def test_a_label_without_positives_ends_the_cli_in_one_line(tmp_path: Path) -> None:
    """End to end through ``kvcast train``: exit 2, one line naming the label, no model."""
    trace = tmp_path / "t.jsonl"
    from kvcast.data import bundled_trace_path

    trace.write_text("".join(bundled_trace_path("conversation").read_text().splitlines(True)[:700]))
    fk = tmp_path / "features.yaml"
    fk.write_text("labels:\n  extra_k: [2, 10000]\n")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        f"data:\n  trace: {trace}\n  features_config: {fk}\n  label: label_burst_k10000\n"
        f"split:\n  purge_ms: 10000\nmodel:\n  kind: rule\n  grid_points: 4\n"
        f"out_dir: {tmp_path / 'out'}\n"
    )
    r = runner.invoke(app, ["train", "--config", str(cfg), "--no-track"])
    assert r.exit_code == 2, r.output
    assert "label_burst_k10000" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out" / "model.onnx").exists()


def test_an_export_over_its_parity_tolerance_publishes_nothing(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """LightGBM's ONNX graph sums its trees in float32, the booster in float64: a real gap of
    a few 1e-7, over a tolerance of 0. The run stops at the export: no model file or metrics,
    no new registry version, the champion alias where it was; the MLflow run is marked
    failed and says why."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-parity"}
    first = run_training(tiny_config("rule", tiny_tables, tmp_path / "a", tracking=tracking))
    assert (first.registered, first.champion) == ("kvcast-parity/1", "promoted")
    logged = MlflowClient(uri).get_run(first.run_id).data  # the tolerance the run was held to
    assert logged.params["export.parity_tolerance"] == "1e-05"
    assert logged.metrics["onnx_parity_tolerance"] == 1e-5
    out = tmp_path / "b"
    cfg = tiny_config("lgbm", tiny_tables, out, tracking=tracking, export={"parity_tolerance": 0.0})
    with pytest.raises(ParityError, match=r"the lgbm model refused: .* by up to \d") as err:
        run_training(cfg)
    assert err.value.gap > 0 and err.value.tolerance == 0
    assert not (out / "model.onnx").exists() and not (out / "metrics.json").exists()
    client = MlflowClient(uri)
    versions = client.search_model_versions("name='kvcast-parity'")
    assert [str(v.version) for v in versions] == ["1"]
    assert str(client.get_model_version_by_alias("kvcast-parity", "champion").version) == "1"
    experiment = client.get_run(first.run_id).info.experiment_id
    [failed] = [r for r in client.search_runs([experiment]) if r.info.run_id != first.run_id]
    assert failed.info.status == "FAILED"
    assert failed.data.tags["export.refused"] == str(err.value)
    assert failed.data.metrics["onnx_parity_max_abs"] == pytest.approx(err.value.gap)


def test_a_parity_refusal_ends_the_cli_in_one_line(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """``kvcast train``: exit 2 and one line naming the kind, the gap and the tolerance; no
    traceback, no model."""
    out = tmp_path / "out"
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data": {"features": str(tiny_tables["sampled"])},
                "split": SPLIT,
                "model": TINY_MODELS["lgbm"],
                "export": {"parity_tolerance": 0.0},
                "out_dir": str(out),
            }
        )
    )
    r = runner.invoke(app, ["train", "--config", str(cfg), "--no-track"], terminal_width=80)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    [line] = [line for line in r.output.splitlines() if line.strip()]
    assert re.fullmatch(
        r"error: ONNX export of the lgbm model refused: .* by up to \d\.\d+e-0\d on the test "
        r"window, over export\.parity_tolerance=0; no model was written or registered",
        line,
    ), line
    assert not (out / "model.onnx").exists()


def test_the_tcn_kind_defaults_to_an_unsampled_table() -> None:
    """``kvcast train --kind tcn`` (embedded defaults) replays every candidate row, as
    configs/train/tcn.yaml shows: a sampled table is what the TCN refuses."""
    cfg = train_config(None, None, None, None, False, "tcn")
    assert cfg.data.negative_keep == 1.0
    assert TrainConfig.model_validate({"model": {"kind": "tcn"}}).data.negative_keep == 1.0
    assert TrainConfig.model_validate({"model": {"kind": "lgbm"}}).data.negative_keep is None


def test_a_tcn_asked_to_sample_negatives_is_refused_before_the_replay() -> None:
    with pytest.raises(ConfigError, match=re.escape("data.negative_keep=0.25")):
        parse_config(TrainConfig, {"data": {"negative_keep": 0.25}, "model": {"kind": "tcn"}})


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        ({"kind": "lgbm", "num_leaves": 200_000}, "num_leaves"),
        ({"kind": "tcn", "layers": 12}, "layers=12"),
        ({"kind": "tcn", "window": 4, "kernel_size": 50}, "kernel_size=50"),
    ],
)
def test_model_params_the_fit_cannot_use_are_refused_up_front(model: dict, needle: str) -> None:
    """LightGBM aborts past 131,072 leaves (a traceback after the replay); a TCN layer whose
    dilation or kernel reaches past the window sees only padding there, and its padding
    grows as 2**layers (layers: 12 ran the machine out of memory)."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        parse_config(TrainConfig, {"model": model})


def test_the_recency_kind_is_reported_beside_its_baseline_not_over_it(
    tiny_tables: dict[str, Path], tiny_trace: Path, tmp_path: Path
) -> None:
    """Kind and baseline are both "recency": the table and the model card showed the
    baseline's metrics only, under the model's name."""
    out = tmp_path / "out"
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data": {"features": str(tiny_tables["sampled"])},
                "split": SPLIT,
                "model": TINY_MODELS["recency"],
                "out_dir": str(out),
            }
        )
    )
    r = runner.invoke(app, ["train", "--config", str(cfg), "--no-track"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "recency baseline" in r.output
    card = (out / "model_card.md").read_text()
    rows = [line for line in card.splitlines() if line.startswith("| recency")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| recency (test)",
        "| recency baseline (test)",
        "| recency (validation)",
    ]
    m = json.loads((out / "metrics.json").read_text())
    assert f"{m['test']['brier']:.4g}" in rows[0] and f"{m['test_recency']['brier']:.4g}" in rows[1]
    r = runner.invoke(
        app,
        ["score", "--trace", str(tiny_trace), "--model", str(out), "--out", str(tmp_path / "s")],
        terminal_width=200,
    )
    assert r.exit_code == 0 and "recency baseline" in r.output, r.output


def test_a_rerun_that_cannot_publish_leaves_the_earlier_model_with_its_own_metrics(
    tiny_data: dict[str, TrainingData], tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """The second run into the same folder could not publish (a directory where its PR-curve
    plot goes): refused before it fits or registers anything (a model registered and promoted
    for files never published was the first version of this check), and the first run's
    model, metrics and card stay together."""
    out = tmp_path / "out"
    cfg = tiny_config("recency", tiny_tables, out)
    first = run_training(cfg, data=tiny_data["sampled"])
    old_model = (out / "model.onnx").read_bytes()
    assert (out / "metrics.json").is_file() and (out / "model_card.md").is_file()
    (out / "pr_curve.png").unlink()
    (out / "pr_curve.png").mkdir()  # the evaluation's plot cannot be written there
    rerun = tiny_config("recency", tiny_tables, out, seed=1, model={"bins": 4})
    old_metrics = (out / "metrics.json").read_bytes()
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracked = rerun.model_copy(
        update={
            "tracking": rerun.tracking.model_copy(
                update={"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-taken"}
            )
        }
    )
    with pytest.raises(OSError, match=r"pr_curve\.png is a directory where the run writes a "):
        run_training(tracked, data=tiny_data["sampled"])
    assert (out / "model.onnx").read_bytes() == old_model
    assert (out / "metrics.json").read_bytes() == old_metrics
    assert json.loads(old_metrics)["kind"] == first.metrics["kind"] == "recency"
    assert not list(out.glob(".partial-*"))
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)  # this store's registry
    assert not client.search_registered_models()  # nothing registered


def test_an_output_folder_that_is_a_file_is_refused_before_the_data_is_built(
    tmp_path: Path,
) -> None:
    """It failed after the replay, as "[Errno 17] File exists: 'x'"."""
    taken = tmp_path / "x"
    taken.write_text("")
    missing = {"sampled": tmp_path / "no_table_here.parquet"}  # never read: checked first
    cfg = tiny_config("rule", missing, taken)
    with pytest.raises(ValueError, match=rf"out_dir: {re.escape(str(taken))} exists and is not a"):
        run_training(cfg)


def test_a_features_table_without_its_feature_config_is_trained_on_with_a_warning(
    tiny_tables: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A table written without its feature config (by kvcast before it recorded one, or by
    hand) gives no label horizon to purge by or record: training says so."""
    from kvcast.training.config import DataConfig
    from kvcast.training.data import label_horizon, load_frame

    table = tiny_tables["full"]  # written without a feature config
    with caplog.at_level("WARNING", logger="kvcast.training.data"):
        _, _, info = load_frame(DataConfig(features=str(table)))
    assert label_horizon(info) is None
    (record,) = [r for r in caplog.records if "records no feature config" in r.getMessage()]
    assert str(table) in record.getMessage() and "rebuild the table" in record.getMessage()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_run_stopped_after_its_export_leaves_the_earlier_model_and_its_metrics(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: type
) -> None:
    """Ctrl-C (or a failure) between the export and the metrics: the folder keeps the earlier
    run's model, metrics and card byte for byte (what a sidecar or `cluster up` may load),
    never a new model.onnx beside none; nothing of the stopped run is left behind."""
    import kvcast.training.pipeline as pipeline

    out = tmp_path / "out"
    run_training(tiny_config("rule", tiny_tables, out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"model.onnx", "metrics.json", "model_card.md"} <= set(before)

    def stopped(*args: object, **kwargs: object) -> None:
        raise stop("stopped")

    monkeypatch.setattr(pipeline.report, "plot_importance", stopped)  # after the export
    with pytest.raises(stop):
        run_training(tiny_config("lgbm", tiny_tables, out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    monkeypatch.undo()
    done = run_training(tiny_config("lgbm", tiny_tables, out))  # and the next run publishes
    assert json.loads((out / "metrics.json").read_text())["kind"] == "lgbm"
    assert done.model_path == out / "model.onnx" and not list(out.glob(".partial-*"))
