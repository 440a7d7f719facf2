"""``kvcast trace synth`` writes a Mooncake trace that kvcast loads back."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.data import bundled_trace_path
from kvcast.features.traces import load_trace

runner = CliRunner()


def test_trace_synth_writes_a_loadable_trace_scale_times_the_source(tmp_path: Path) -> None:
    out = tmp_path / "synth.jsonl.gz"
    args = ["trace", "synth", "--trace", "bundled:conversation", "--scale", "2"]
    r = runner.invoke(app, [*args, "--out", str(out), "--sessions"])
    assert r.exit_code == 0, r.output
    src = load_trace(bundled_trace_path("conversation")).requests
    got = load_trace(out).requests
    assert len(got) == 2 * len(src)
    assert got["session"].notna().all() and got["session"].nunique() > len(got) // 10
    assert "requests over" in r.output


def test_trace_synth_has_help_and_refuses_bad_input(tmp_path: Path) -> None:
    r = runner.invoke(app, ["trace", "synth", "--help"])
    assert r.exit_code == 0 and "--scale" in r.output
    r = runner.invoke(app, ["trace", "synth", "--trace", "bundled:conversation", "--scale", "0"])
    assert r.exit_code == 2 and "--scale must be a positive integer, got 0" in r.output
    missing = tmp_path / "nope.jsonl"
    r = runner.invoke(app, ["trace", "synth", "--trace", str(missing)])
    assert r.exit_code == 2 and "nope.jsonl" in r.output


def test_trace_reuse_prints_the_hazard_and_writes_json_and_plot(tmp_path: Path) -> None:
    import json

    args = ["trace", "reuse", "--trace", "bundled:conversation", "--idle-s", "0,60"]
    r = runner.invoke(app, [*args, "--json", str(tmp_path / "h.json"), "--plot",
                            str(tmp_path / "h.png")])  # fmt: skip
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "h.json").read_text())
    assert [row["idle_ms"] for row in got["rows"]] == [0.0, 60_000.0]
    assert all(0.0 <= row["p"] <= 1.0 and row["waiting"] > 0 for row in got["rows"])
    assert (tmp_path / "h.png").stat().st_size > 0
    assert "P(next use within 30 s" in r.output


def test_trace_reuse_refuses_bad_ages() -> None:
    r = runner.invoke(app, ["trace", "reuse", "--trace", "bundled:conversation", "--idle-s", "a"])
    assert r.exit_code == 2 and "--idle-s must be comma-separated seconds, got 'a'" in r.output
    r = runner.invoke(app, ["trace", "reuse", "--trace", "bundled:conversation", "--idle-s", "-5"])
    assert r.exit_code == 2 and "idle ages must be non-negative" in r.output
