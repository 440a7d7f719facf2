from __future__ import annotations

import json
from pathlib import Path

from sample_trace import head
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.features.dataset import file_hash, read_feature_dataset

runner = CliRunner()


def test_features_writes_dataset_with_spec_and_hashes_and_prints_summary(tmp_path: Path) -> None:
    trace = head(tmp_path)
    out = tmp_path / "feat"
    r = runner.invoke(app, ["features", "--trace", str(trace), "--out", str(out)])
    assert r.exit_code == 0, r.output
    df, spec, info = read_feature_dataset(out)
    assert list(spec.names) == [c for c in df.columns if c in set(spec.names)]
    assert info["trace_hash"] == file_hash(trace) and len(info["config_hash"]) == 16
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == len(df) > 0 and 0 < summary["positives_rate"] < 1
    assert set(summary["null_rate"]) == set(spec.names)
    assert "positives" in r.output and "null rate" in r.output


def test_features_refuses_unknown_policy_and_bad_features_config(tmp_path: Path) -> None:
    trace = head(tmp_path, 50)
    r = runner.invoke(app, ["features", "--trace", str(trace), "--policy", "zzz"])
    assert r.exit_code == 2 and "unknown policy 'zzz'" in r.output
    bad = tmp_path / "f.yaml"
    bad.write_text("labels:\n  horizon: 3\n")
    r = runner.invoke(app, ["features", "--trace", str(trace), "--features-config", str(bad)])
    assert r.exit_code == 2 and "labels.horizon" in r.output


def test_a_trace_without_ticks_gives_the_same_empty_table_on_either_engine(
    tmp_path: Path,
) -> None:
    """One request: no decision tick, no rows. The Dask engine wrote no part and refused
    ("no feature parts to join") where the pandas engine writes the empty table."""
    trace = head(tmp_path, 1)
    tables = {}
    for engine in ("pandas", "dask"):
        out = tmp_path / engine
        args = ["features", "--trace", str(trace), "--out", str(out), "--engine", engine,
                "--workers", "1"]  # fmt: skip
        r = runner.invoke(app, args, env={"COLUMNS": "250"})
        assert r.exit_code == 0, r.output
        said = " ".join(r.output.split())  # (the console may wrap it anywhere)
        assert "no rows. A tick is labelled only when its label window" in said
        summary = json.loads((out / "summary.json").read_text())  # no rates of no rows
        assert summary["rows"] == 0 and summary["positives_rate"] is None
        assert set(summary["null_rate"].values()) == {None}
        df, spec, _ = read_feature_dataset(out)
        tables[engine] = (df, spec.digest)
    (pdf, pspec), (ddf, dspec) = tables["pandas"], tables["dask"]
    assert len(pdf) == len(ddf) == 0 and pspec == dspec
    assert list(pdf.columns) == list(ddf.columns)


def test_the_table_records_its_feature_config_so_training_knows_the_label_horizon(
    tmp_path: Path,
) -> None:
    """A features.parquet trained on (``--features``) must say what its labels look ahead:
    the split purges that much, and the model records it (the champion rule, the simulator
    and the sidecar compare horizons). It was dropped: labels of 20 s, a purge of 10 s."""
    from kvcast.features.config import FeatureConfig
    from kvcast.training.config import DataConfig, SplitConfig
    from kvcast.training.data import TrainingData, label_horizon, load_frame

    trace = head(tmp_path)
    fcfg = tmp_path / "f.yaml"
    fcfg.write_text("labels: {horizon_ms: 20000.0}\nticks: {period_ms: 2000.0}\n")
    for engine in ("pandas", "dask"):
        out = tmp_path / engine
        args = ["features", "--trace", str(trace), "--out", str(out), "--features-config",
                str(fcfg), "--engine", engine, "--workers", "1"]  # fmt: skip
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        df, spec, info = load_frame(DataConfig(features=out))
        recorded = FeatureConfig.model_validate_json(info["feature_config"])
        assert recorded.digest() == info["config_hash"], engine
        assert label_horizon(info) == 20000.0, engine
        data = TrainingData.build(df, spec, SplitConfig(purge_ms=10000.0), info=info)
        t, e1 = data.frame["tick_ms"].to_numpy(), data.split.bounds["validation"][0]
        assert t[data.rows("train")].max() + 20000.0 < e1, engine


def test_a_rerun_leaves_no_part_of_an_earlier_run_beside_its_table(tmp_path: Path) -> None:
    """The Dask engine writes one part per window under parts/: a rerun with fewer windows
    (or on the pandas engine) must not leave the earlier run's parts there, where reading
    the folder would mix two runs."""
    import pandas as pd

    trace, out = head(tmp_path), tmp_path / "feat"
    args = ["features", "--trace", str(trace), "--out", str(out), "--workers", "1"]
    for window_ms in ("20000", "600000"):
        r = runner.invoke(app, [*args, "--engine", "dask", "--window-ms", window_ms])
        assert r.exit_code == 0, r.output
    parts = sorted((out / "parts").glob("*.parquet"))
    assert len(parts) == 1
    assert len(pd.read_parquet(parts[0])) == len(read_feature_dataset(out)[0])
    r = runner.invoke(app, [*args, "--engine", "pandas"])
    assert r.exit_code == 0, r.output
    assert list((out / "parts").glob("*.parquet")) == []


def test_the_printed_positive_rate_is_that_of_every_candidate_not_of_the_sampled_rows(
    tmp_path: Path,
) -> None:
    """Every positive is kept and a quarter of the negatives: the share of positives among
    the rows overstates the base rate about fourfold; the weighted rate is the real one."""
    out = tmp_path / "feat"
    r = runner.invoke(app, ["features", "--trace", str(head(tmp_path)), "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["positives_rate_weighted"] < s["positives_rate"] / 2
    assert f"{s['positives_rate_weighted']:.1%} of all candidates" in " ".join(r.output.split())
