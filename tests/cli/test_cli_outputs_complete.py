"""What ``simulate`` and ``evaluate`` leave in ``--out`` is one run's, whole: ``summary.json``
is written last, so a run interrupted while writing (Ctrl-C) leaves none, not a summary
beside plots or tables of another run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.data import bundled_trace_path

runner = CliRunner()


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "head.jsonl"
    lines = bundled_trace_path("conversation").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:40]))
    return path


def interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def test_simulate_interrupted_while_writing_leaves_no_summary(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    (out / "summary.json").write_text('{"policy": "an earlier run"}\n')
    monkeypatch.setattr(pd.DataFrame, "to_parquet", interrupt)
    r = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--policy", "round_robin", "--out", str(out)]
    )
    assert r.exit_code == 130 and "interrupted" in r.output  # said, as the shell's SIGINT
    assert "Traceback" not in r.output
    assert not (out / "summary.json").exists()


def test_evaluate_interrupted_while_plotting_leaves_no_summary(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcast.simulator.plots as plots

    out = tmp_path / "ev"
    out.mkdir()
    (out / "summary.json").write_text('[{"policy": "an earlier run"}]\n')
    monkeypatch.setattr(plots, "write_plots", interrupt)
    r = runner.invoke(
        app,
        ["evaluate", "--trace", str(trace), "--policies", "round_robin", "--jobs", "1",
         "--out", str(out)],
    )  # fmt: skip
    assert r.exit_code != 0
    assert not (out / "summary.json").exists()


def test_features_interrupted_while_writing_leaves_no_summary(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcast.features.dataset as dataset

    out = tmp_path / "feat"
    out.mkdir()
    (out / "summary.json").write_text('{"rows": 1}\n')
    monkeypatch.setattr(dataset, "write_feature_dataset", interrupt)
    r = runner.invoke(app, ["features", "--trace", str(trace), "--out", str(out)])
    assert r.exit_code != 0
    assert not (out / "summary.json").exists()


def test_quickstart_removes_an_earlier_runs_results_before_training_new_models(
    tmp_path: Path,
) -> None:
    """An earlier run's summary and verdict go before the models they were judged on are
    trained again: a run stopped during training (here a trace that fails to load) leaves
    no summary naming models that are not the ones beside it."""
    out = tmp_path / "qs"
    out.mkdir()
    for name in ("summary.json", "verdict.json"):
        (out / name).write_text('{"from": "an earlier run"}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": "many"}\n')
    r = runner.invoke(app, ["quickstart", "--trace", str(bad), "--no-track", "--out", str(out)])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    assert not (out / "summary.json").exists() and not (out / "verdict.json").exists()
