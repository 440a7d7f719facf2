from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.features.dataset import file_hash, read_feature_dataset

runner = CliRunner()


def head(tmp_path: Path, n: int = 400) -> Path:
    src = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"
    p = tmp_path / "head.jsonl"
    p.write_text("".join(src.read_text().splitlines(keepends=True)[:n]))
    return p


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
    trace = head(tmp_path, n=1)
    tables = {}
    for engine in ("pandas", "dask"):
        out = tmp_path / engine
        args = ["features", "--trace", str(trace), "--out", str(out), "--engine", engine,
                "--workers", "1"]  # fmt: skip
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        df, spec, _ = read_feature_dataset(out)
        tables[engine] = (df, spec.digest)
    (pdf, pspec), (ddf, dspec) = tables["pandas"], tables["dask"]
    assert len(pdf) == len(ddf) == 0 and pspec == dspec
    assert list(pdf.columns) == list(ddf.columns)
