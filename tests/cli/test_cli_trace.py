"""``kvcast trace synth`` writes a Mooncake trace that kvcast loads back."""

from __future__ import annotations

from pathlib import Path

import pytest
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
    assert r.exit_code == 2 and "--idle-s must be finite seconds >= 0, got '-5'" in r.output


def test_trace_reuse_refuses_a_non_positive_window_naming_the_option() -> None:
    for bad in ("0", "-3"):
        args = ["trace", "reuse", "--trace", "bundled:conversation", "--window-s", bad]
        r = runner.invoke(app, args)
        assert r.exit_code == 2
        assert f"--window-s must be a positive number of seconds, got {bad}" in r.output


def test_trace_agent_writes_a_loadable_agent_workload(tmp_path: Path) -> None:
    out = tmp_path / "agent.jsonl"
    args = ["trace", "agent", "--duration-s", "300", "--tasks-per-s", "0.2", "--seed", "7"]
    r = runner.invoke(app, [*args, "--tool-s", "2", "--out", str(out), "--sessions"])
    assert r.exit_code == 0, r.output
    got = load_trace(out).requests
    tasks = got["session"].nunique()
    assert f"{len(got):,} requests from {tasks:,} tasks" in " ".join(r.output.split())
    assert len(got) > tasks > 20 and got["arrival_ms"].max() < 300_000
    # the same seed writes the same trace; without --sessions no session key is written
    again = tmp_path / "again.jsonl"
    assert runner.invoke(app, [*args, "--tool-s", "2", "--out", str(again)]).exit_code == 0
    plain = load_trace(again).requests
    assert plain["session"].isna().all()
    assert plain["block_hashes"].tolist() == got["block_hashes"].tolist()


def test_trace_agent_reads_a_config_and_refuses_bad_values(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("apps: 2\nduration_s: 120\nseed: 1\n")
    out = tmp_path / "a.jsonl"
    r = runner.invoke(app, ["trace", "agent", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = load_trace(out).requests
    assert len(got) and got["arrival_ms"].max() < 120_000
    assert got["block_hashes"].str[0].nunique() <= 2  # every prompt starts with an app's
    r = runner.invoke(app, ["trace", "agent", "--tasks-per-s", "-1", "--out", str(out)])
    assert r.exit_code == 2 and "tasks_per_s" in r.output and "-1.0" in r.output
    r = runner.invoke(app, ["trace", "agent", "--tasks-per-s", "1e9", "--duration-s", "1",
                            "--out", str(out)], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 2 and "about 1,000,000,000 tasks" in r.output  # not hours of work
    cfg.write_text("apps: 0\n")
    r = runner.invoke(app, ["trace", "agent", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 2 and "apps" in r.output and "Traceback" not in r.output


def test_trace_reuse_names_the_option_for_empty_ages_and_min_blocks() -> None:
    base = ["trace", "reuse", "--trace", "bundled:conversation"]
    r = runner.invoke(app, [*base, "--idle-s", ","])
    assert r.exit_code == 2 and "--idle-s must be finite seconds >= 0, got ','" in r.output
    r = runner.invoke(app, [*base, "--min-blocks", "0"])
    assert r.exit_code == 2 and "--min-blocks must be at least 1, got 0" in r.output


def test_trace_synth_and_reuse_take_skip_bad(tmp_path: Path) -> None:
    src = tmp_path / "src.jsonl"
    good = '{"timestamp": %d, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, %d]}\n'
    src.write_text(good % (0, 3) + "[1, 2]\n" + good % (1000, 4))
    out = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["trace", "synth", "--trace", str(src), "--scale", "2",
                            "--out", str(out)])  # fmt: skip
    assert r.exit_code == 2 and "src.jsonl:2: expected a JSON object" in r.output
    r = runner.invoke(app, ["trace", "synth", "--trace", str(src), "--scale", "2",
                            "--out", str(out), "--skip-bad"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "1 bad line skipped" in r.output and len(load_trace(out)) == 4
    r = runner.invoke(app, ["trace", "reuse", "--trace", str(src), "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert "1 bad line skipped" in r.output


def test_trace_agent_refuses_a_window_without_requests(tmp_path: Path) -> None:
    out = tmp_path / "agent.jsonl"
    r = runner.invoke(app, ["trace", "agent", "--duration-s", "0.001", "--out", str(out)])
    assert r.exit_code == 2 and "no request arrives within 0.001 s" in r.output
    assert not out.exists()


def test_trace_reuse_json_is_strict_when_no_request_waits(tmp_path: Path) -> None:
    import json

    one = tmp_path / "one.jsonl"
    one.write_text(bundled_trace_path("conversation").read_text().splitlines(keepends=True)[0])
    out = tmp_path / "reuse.json"
    r = runner.invoke(app, ["trace", "reuse", "--trace", str(one), "--json", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    got = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {out}"))
    assert got["ever_followed"] is None and all(row["p"] is None for row in got["rows"])
    assert "nan" not in r.output


def test_trace_group_help_lists_each_command_without_a_broken_line() -> None:
    # typer's rich listing keeps the line breaks of a docstring's first paragraph
    import typer

    group = typer.main.get_command(app).commands["trace"]
    for name, cmd in group.commands.items():
        first = (cmd.help or "").strip().split("\n\n")[0]
        assert "\n" not in first, f"trace {name}: {first!r}"
