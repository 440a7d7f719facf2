"""``kvcast score`` writes metrics.json with every metric name, model beside recency."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_training import tiny_config
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
