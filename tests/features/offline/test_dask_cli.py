"""``kvcast features --engine dask`` writes the dataset the pandas engine writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.features.dataset import read_feature_dataset

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[3] / "kvcast/data/traces/conversation_sample.jsonl"


def small_inputs(tmp_path: Path) -> tuple[Path, Path]:
    trace = tmp_path / "head.jsonl"
    trace.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:600]))
    fcfg = tmp_path / "features.yaml"
    fcfg.write_text("horizon_ms: 60000\ndistinct_window_ms: 20000\n")
    return trace, fcfg


def test_features_dask_engine_on_local_cluster_writes_the_pandas_dataset(tmp_path: Path) -> None:
    trace, fcfg = small_inputs(tmp_path)
    common = ["features", "--trace", str(trace), "--features-config", str(fcfg)]
    r = runner.invoke(app, [*common, "--out", str(tmp_path / "pd")])
    assert r.exit_code == 0, r.output
    dask_args = ["--engine", "dask", "--scheduler", "local", "--workers", "2"]
    r = runner.invoke(
        app, [*common, "--out", str(tmp_path / "dk"), *dask_args, "--window-ms", "30000"]
    )
    assert r.exit_code == 0, r.output
    ref, ref_spec, ref_info = read_feature_dataset(tmp_path / "pd")
    got, spec, info = read_feature_dataset(tmp_path / "dk")
    assert spec == ref_spec and info == ref_info
    assert len(list((tmp_path / "dk" / "parts").glob("part-*.parquet"))) > 2
    got = got.sort_values(["block", "tick_ms"], kind="stable").reset_index(drop=True)
    assert list(got.columns) == list(ref.columns) and len(got) == len(ref) > 0
    for col in ref.columns:
        a, b = ref[col].to_numpy(), got[col].to_numpy()
        assert np.allclose(a, b, rtol=0.0, atol=1e-9, equal_nan=True), col
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("pd", "dk")]
    assert summaries[1]["rows"] == summaries[0]["rows"]
    assert summaries[1]["null_rate"] == summaries[0]["null_rate"]
    assert summaries[1]["bad_input"] == summaries[0]["bad_input"]


def test_features_refuses_unknown_engine_and_unreachable_scheduler(tmp_path: Path) -> None:
    trace, _ = small_inputs(tmp_path)
    r = runner.invoke(app, ["features", "--trace", str(trace), "--engine", "spark"])
    assert r.exit_code == 2 and "unknown --engine 'spark'" in r.output
    args = ["features", "--trace", str(trace), "--engine", "dask"]
    r = runner.invoke(app, [*args, "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "cannot reach the Dask scheduler" in r.output
