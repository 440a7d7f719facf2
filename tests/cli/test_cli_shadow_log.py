"""``kvcast simulate --shadow-log``: the decider runs on every tick and acts on nothing; its
decisions land in the sidecar's decision-log format, which ``kvcast shadow-eval`` replays."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from kvcast.cli.app import app

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"


def test_a_shadow_run_acts_on_nothing_and_its_log_replays(tmp_path: Path) -> None:
    trace = tmp_path / "head.jsonl"
    trace.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:400]))
    log = tmp_path / "shadow" / "decisions.parquet"
    runs = {}
    for name, extra in (("dynamo_kv", []), ("oracle", ["--shadow-log", str(log)])):
        out = tmp_path / name
        r = runner.invoke(
            app,
            ["simulate", "--trace", str(trace), "--policy", name, "--time-scale", "2",
             "--out", str(out), *extra],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        runs[name] = out
    shadow = json.loads((runs["oracle"] / "summary.json").read_text())
    assert shadow["replications"] == 0 and shadow["bytes_replicated"] == 0
    # nothing acted: every request was served exactly as by the base router alone
    cols = ["request_id", "node", "ttft_ms", "cached_blocks"]
    base = pd.read_parquet(runs["dynamo_kv"] / "requests.parquet")[cols]
    assert base.equals(pd.read_parquet(runs["oracle"] / "requests.parquet")[cols])
    decisions = pd.read_parquet(log)
    assert len(decisions) > 0 and set(decisions["mode"]) == {"shadow"}
    r = runner.invoke(
        app,
        ["shadow-eval", "--decisions", str(log), "--trace", str(trace), "--time-scale", "2",
         "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["decisions"] == int((decisions["kind"] != "evict").sum())
    # the oracle copies only chains that arrive within its window: every copy is a hit
    assert report["hit_rate"] == 1.0 and report["bytes_wasted"] == 0


def test_shadow_log_needs_a_replicating_policy(tmp_path: Path) -> None:
    trace = tmp_path / "head.jsonl"
    trace.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:50]))
    r = runner.invoke(
        app,
        ["simulate", "--trace", str(trace), "--policy", "dynamo_kv", "--shadow-log",
         str(tmp_path / "d.parquet"), "--out", str(tmp_path / "o")],
    )  # fmt: skip
    assert r.exit_code == 2 and "does not replicate" in r.output
