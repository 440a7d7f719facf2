"""``kvcast score`` writes metrics.json with every metric name, model beside recency; the
tables ``kvcast train`` and ``kvcast score`` print show every metric recorded."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from tiny_training import SPLIT, TINY_MODELS, tiny_config
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.training.evaluate import METRICS
from kvcast.training.pipeline import run_training

runner = CliRunner()


def test_score_writes_model_and_recency_metrics_side_by_side(
    tiny_tables: dict[str, Path], tiny_trace: Path, tmp_path: Path
) -> None:
    result = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "m"))
    out = tmp_path / "score"
    r = runner.invoke(
        app,
        ["score", "--trace", str(tiny_trace), "--model", str(result.model_path), "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["model"]) == list(METRICS)  # ece_quantile beside ece
    assert list(metrics["recency"]) == list(METRICS)
    assert metrics["model"]["rows"] == metrics["recency"]["rows"] > 0
    assert metrics["kind"] == "lgbm"
    assert 0 < metrics["positives"] < metrics["rows"]  # both classes: no warning
    assert "warning" not in r.output


def test_score_on_rows_without_a_positive_says_the_ranking_metrics_are_undefined(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """Every request with blocks of its own, a second apart: no block is used again, so no
    row is positive and PR-AUC / ROC-AUC are nan; said, not printed silently."""
    result = run_training(tiny_config("lgbm", tiny_tables, tmp_path / "m"))
    trace = tmp_path / "noreuse.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": 1000 * i, "input_length": 1024, "output_length": 8,
                    "hash_ids": [2 * i + 1, 2 * i + 2]}) + "\n"
        for i in range(150)
    ))  # fmt: skip
    out = tmp_path / "score"
    r = runner.invoke(app, ["score", "--trace", str(trace), "--model", str(result.model_path),
                            "--out", str(out)], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["positives"] == 0 and metrics["rows"] > 0
    assert metrics["model"]["pr_auc"] is None
    said = " ".join(r.output.split())  # (the console may wrap it anywhere)
    assert "no positive row among the" in said and "undefined here" in said


def test_score_refuses_a_file_that_is_not_a_model_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x00\x01 definitely not onnx")
    r = runner.invoke(app, ["score", "--trace", "bundled:conversation", "--model", str(bad)])
    assert r.exit_code == 2 and "not a loadable ONNX model" in r.output


def test_score_on_a_trace_with_nothing_to_score_is_one_line(
    tiny_tables: dict[str, Path], tiny_trace: Path, tmp_path: Path
) -> None:
    result = run_training(tiny_config("recency", tiny_tables, tmp_path / "m"))
    one = tmp_path / "one.jsonl"
    one.write_text(tiny_trace.read_text().splitlines(keepends=True)[0])
    r = runner.invoke(app, ["score", "--trace", str(one), "--model", str(result.model_path)])
    assert r.exit_code == 2 and "no block to score" in r.output, r.output


def table_rows(output: str) -> dict[str, list[str]]:
    """A printed metrics table: metric name -> its cells, in column order."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if len(cells) > 1 and cells[0] in METRICS:
            rows[cells[0]] = cells[1:]
    return rows


def test_train_and_score_tables_show_ece_quantile_after_ece(
    tiny_tables: dict[str, Path], tiny_trace: Path, tmp_path: Path
) -> None:
    """Runs record ``ece_quantile`` (equal-mass bins) beside ``ece``: the tables printed
    listed the predictor's metrics only, so it never showed."""
    out = tmp_path / "m"
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data": {"features": str(tiny_tables["sampled"])},
                "split": SPLIT,
                "model": TINY_MODELS["rule"],
                "out_dir": str(out),
            }
        )
    )
    r = runner.invoke(app, ["train", "--config", str(cfg), "--no-track"], terminal_width=200)
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    rows = table_rows(r.output)
    assert list(rows) == list(METRICS)  # ece_quantile right after ece
    for name in ("ece", "ece_quantile"):
        assert rows[name] == [f"{m['test'][name]:.4g}", f"{m['test_recency'][name]:.4g}"]
    score = tmp_path / "score"
    r = runner.invoke(
        app,
        ["score", "--trace", str(tiny_trace), "--model", str(out), "--out", str(score)],
        terminal_width=200,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((score / "metrics.json").read_text())
    rows = table_rows(r.output)
    assert list(rows) == list(METRICS)
    for name in ("ece", "ece_quantile"):
        assert rows[name] == [f"{s['model'][name]:.4g}", f"{s['recency'][name]:.4g}"]
