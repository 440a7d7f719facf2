"""``kvcast verdict`` and ``kvcast evaluate --verdict``: the goal judged from real summaries,
the loads it reads run by evaluate, one-line errors for what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.simulator.goal_config import ANCHORS
from kvcast.simulator.verdict import CHECKS

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"


def head(tmp_path: Path, lines: int) -> Path:
    p = tmp_path / f"head{lines}.jsonl"
    p.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:lines]))
    return p


def test_evaluate_verdict_runs_the_loads_it_reads_and_judges_every_check(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 300)), "--time-scale", "1", "--verdict",
            "--policies", "mooncake_conductor,dynamo_kv,oracle", "--jobs", "1",
            "--out", str(out),
        ],
        terminal_width=200,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "summary.json").read_text())
    verdict = json.loads((out / "verdict.json").read_text())
    [group] = verdict["groups"]
    caps = {s["policy"]: s["capacity_time_scale"] for s in rows}
    bar = max((p for p in caps if p in ANCHORS), key=lambda p: caps[p])
    assert group["bar"] == bar and group["bar_capacity"] == caps[bar]
    loads = {s["time_scale"] for s in rows if s["policy"] == "oracle"}
    assert {0.5, 1.0, caps[bar]} <= loads  # the low load and the bar's capacity load were run
    [oracle] = group["policies"]
    assert oracle["router"] == "dynamo_kv"  # the embedded decider's router
    checks = {c["name"]: c for c in oracle["checks"]}
    assert set(checks) == set(CHECKS) - {"oracle_share"}
    assert all(c["met"] is not None for c in checks.values()), checks  # all measured
    assert "goal check: bar " + bar in " ".join(r.output.split())


def test_verdict_reads_a_summary_and_strict_exits_3_when_the_goal_is_missed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 200)), "--time-scale", "0.5,1",
            "--capacity", "--policies", "dynamo_kv,oracle", "--jobs", "1", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert not (out / "verdict.json").exists()
    summary = out / "summary.json"
    r = runner.invoke(app, ["verdict", "--summary", str(summary)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert (out / "verdict.json").is_file() and "capacity_gain" in r.output
    met = json.loads((out / "verdict.json").read_text())["groups"][0]["policies"][0]["met"]
    r = runner.invoke(app, ["verdict", "--summary", str(summary), "--strict",
                            "--out", str(tmp_path / "v.json")])  # fmt: skip
    assert r.exit_code == (0 if met else 3), r.output
    assert (tmp_path / "v.json").is_file()


def test_verdict_refuses_what_is_not_a_summary_in_one_line(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["verdict", "--summary", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = runner.invoke(app, ["verdict", "--summary", str(bad)])
    assert r.exit_code == 2 and "cannot read" in r.output and "Traceback" not in r.output
    bad.write_text(json.dumps([{"policy": "oracle", "time_scale": 1.0}]))
    r = runner.invoke(app, ["verdict", "--summary", str(bad)])
    assert r.exit_code == 2 and "ttft_ms" in r.output


def test_goal_without_verdict_is_refused_and_a_bad_goal_names_its_key(tmp_path: Path) -> None:
    goal = tmp_path / "goal.yaml"
    goal.write_text("capacity_gain: -1\n")
    trace = str(head(tmp_path, 50))
    r = runner.invoke(app, ["evaluate", "--trace", trace, "--goal", str(goal)])
    assert r.exit_code == 2 and "--verdict" in r.output
    r = runner.invoke(app, ["evaluate", "--trace", trace, "--verdict", "--goal", str(goal)])
    assert r.exit_code == 2 and "capacity_gain" in r.output
