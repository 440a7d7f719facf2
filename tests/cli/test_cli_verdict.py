"""``kvcast verdict`` and ``kvcast evaluate --verdict``: the goal judged from real summaries,
the loads it reads run by evaluate, one-line errors for what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

from sample_trace import head
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.simulator.goal_config import ANCHORS
from kvcast.simulator.verdict import CHECKS

runner = CliRunner()


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
    assert (out / "verdict.png").stat().st_size > 1000


def test_verdict_reads_an_evaluations_summary_and_writes_verdict_json(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    (out).mkdir()
    (out / "verdict.json").write_text("{}")  # an earlier run's: gone with the new summary
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 200)), "--time-scale", "0.5,1",
            "--capacity", "--policies", "dynamo_kv,oracle", "--jobs", "1", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert not (out / "verdict.json").exists()
    r = runner.invoke(app, ["verdict", "--summary", str(out / "summary.json")],
                      terminal_width=200)  # fmt: skip
    assert r.exit_code == 0, r.output
    [group] = json.loads((out / "verdict.json").read_text())["groups"]
    assert group["bar"] == "dynamo_kv" and [p["policy"] for p in group["policies"]] == ["oracle"]
    assert "capacity_gain" in r.output


def summary_file(tmp_path: Path, oracle_cap: float) -> Path:
    """A hand-made summary: dynamo_kv at capacity x1 and the oracle on it, at x0.5 and x1."""

    def row(policy: str, x: float, cap: float, p50: float) -> dict[str, object]:
        return {"policy": policy, "time_scale": x, "ttft_ms": {"p50": p50, "p99": 10 * p50},
                "bytes_replicated": 0, "bytes_replicated_used": 0,
                "active_evictions_by_speculative": 0, "peak_speculative_bytes_over_quota": 0,
                "capacity_time_scale": cap, "capacity_bound": None,
                "capacity_bound_time_scale": None,
                **({"base_router": "dynamo_kv"} if policy == "oracle" else {})}  # fmt: skip

    rows = [row("dynamo_kv", 0.5, 1.0, 100), row("dynamo_kv", 1.0, 1.0, 400),
            row("oracle", 0.5, oracle_cap, 100), row("oracle", 1.0, oracle_cap, 200)]  # fmt: skip
    path = tmp_path / f"summary-{oracle_cap}.json"
    path.write_text(json.dumps(rows))
    return path


def test_strict_exits_3_unless_every_judged_policy_meets_the_goal(tmp_path: Path) -> None:
    met = runner.invoke(app, ["verdict", "--summary", str(summary_file(tmp_path, 1.2)),
                              "--strict"])  # fmt: skip
    assert met.exit_code == 0, met.output
    missed = runner.invoke(app, ["verdict", "--summary", str(summary_file(tmp_path, 1.1)),
                                 "--strict", "--out", str(tmp_path / "v.json")])  # fmt: skip
    assert missed.exit_code == 3, missed.output
    assert json.loads((tmp_path / "v.json").read_text())["groups"][0]["policies"][0]["met"] is False
    anchors = tmp_path / "anchors.json"  # runs, none of a replicating policy
    rows = json.loads(summary_file(tmp_path, 1.2).read_text())
    anchors.write_text(json.dumps([r for r in rows if r["policy"] == "dynamo_kv"]))
    r = runner.invoke(app, ["verdict", "--summary", str(anchors), "--strict"])
    assert r.exit_code == 3 and "nothing judged" in r.output


def test_a_low_load_the_trace_cannot_take_is_left_out_not_the_end_of_the_run(
    tmp_path: Path,
) -> None:
    """With sessions load scaling, x0.5 of a one-session trace draws no session: the verdict
    reports the low-load checks unmeasured, and everything else is written."""
    sim = tmp_path / "sim.yaml"
    sim.write_text("load_scaling: sessions\n")
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 1)), "--config", str(sim),
            "--time-scale", "1", "--policies", "dynamo_kv,oracle", "--verdict", "--jobs", "1",
            "--out", str(out),
        ],
        terminal_width=200,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "x0.5 cannot be played" in " ".join(r.output.split())
    [group] = json.loads((out / "verdict.json").read_text())["groups"]
    checks = {c["name"]: c for c in group["policies"][0]["checks"]}
    assert checks["low_load_p50"]["met"] is None
    assert "cannot be played" in checks["low_load_p50"]["note"]
    assert {s["time_scale"] for s in json.loads((out / "summary.json").read_text())} >= {1.0}


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
