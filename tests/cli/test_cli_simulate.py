"""The CLI contract: outputs, summary keys, --help everywhere, one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app

runner = CliRunner()

SUMMARY_KEYS = {
    "policy",
    "trace",
    "time_scale",
    "nodes",
    "requests",
    "ttft_ms",
    "tpot_ms",
    "queue_ms",
    "slo",
    "slo_attainment",
    "goodput_rps",
    "prefix_hit_ratio",
    "recomputed_tokens",
    "bytes_replicated",
    "bytes_replicated_used",
    "bytes_wasted",
    "replications",
    "replication_hit_rate",
    "mean_lead_time_ms",
    "active_evictions_by_speculative",
    "peak_speculative_bytes_over_quota",
    "sim_wall_s",
}


def small_trace(tmp_path: Path) -> Path:
    src = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"
    p = tmp_path / "small.jsonl"
    p.write_text("".join(src.read_text().splitlines(keepends=True)[:300]))
    return p


def test_simulate_writes_summary_with_contract_keys_and_requests_parquet(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(small_trace(tmp_path)),
            "--policy",
            "dynamo_kv",
            "--out",
            str(out),
            "--time-scale",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert set(s) >= SUMMARY_KEYS
    assert set(s["ttft_ms"]) == {"p50", "p95", "p99", "mean"} and s["time_scale"] == 2.0
    # a plain router places no copy: no hit rate, no lead time (not 0: "none used", "0 s")
    assert s["replications"] == 0
    assert s["replication_hit_rate"] is None and s["mean_lead_time_ms"] is None
    rq = pd.read_parquet(out / "requests.parquet")
    assert len(rq) == 300 and {
        "node",
        "arrival_ms",
        "queue_ms",
        "ttft_ms",
        "cached_blocks",
        "transferred_blocks",
    } <= set(rq.columns)
    assert (out / "timeline.parquet").is_file()


def test_evaluate_writes_a_list_per_policy_and_load_plus_plots(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate",
            "--trace",
            str(small_trace(tmp_path)),
            "--policies",
            "round_robin,llmd_precise",
            "--time-scale",
            "1,2",
            "--capacity",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "summary.json").read_text())
    assert [(s["policy"], s["time_scale"]) for s in rows] == [
        ("round_robin", 1.0),
        ("round_robin", 2.0),
        ("llmd_precise", 1.0),
        ("llmd_precise", 2.0),
    ]
    assert all(SUMMARY_KEYS | {"capacity_time_scale"} <= set(s) for s in rows)
    for png in ("ttft_cdf.png", "p99_vs_load.png"):
        assert (out / png).stat().st_size > 1000


@pytest.mark.parametrize("cmd", [[], ["simulate"], ["evaluate"], ["quickstart"], ["policies"]])
def test_every_command_has_help(cmd: list[str]) -> None:
    r = runner.invoke(app, [*cmd, "--help"])
    assert r.exit_code == 0 and "Usage" in r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "round_robin", "--time-scale", "0"], "must be a positive number"),
        (["--policy", "round_robin", "--format", "xml"], "unknown trace format"),
        (
            ["--policy", "round_robin", "--nodes", "0"],  # the option, not the config key
            "command line (--nodes): key 'nodes': Input should be greater than 0 (got 0)",
        ),
    ],
)
def test_bad_input_gives_one_line_reason_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    r = runner.invoke(
        app,
        ["simulate", "--trace", str(small_trace(tmp_path)), *args, "--out", str(tmp_path / "o")],
    )
    assert r.exit_code == 2
    assert message in r.output and "Traceback" not in r.output


def test_missing_trace_file_is_named(tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["simulate", "--trace", str(tmp_path / "nope.jsonl"), "--policy", "round_robin"]
    )
    assert r.exit_code == 2 and "nope.jsonl" in r.output


def test_bad_config_key_is_named_with_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nodez: 4\n")
    r = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(small_trace(tmp_path)),
            "--policy",
            "round_robin",
            "--config",
            str(cfg),
        ],
    )
    assert r.exit_code == 2 and "c.yaml: key 'nodez': unknown key" in r.output


def test_malformed_trace_line_is_named_and_skip_bad_recovers(tmp_path: Path) -> None:
    p = small_trace(tmp_path)
    p.write_text(p.read_text() + "{not json\n")
    r = runner.invoke(
        app,
        ["simulate", "--trace", str(p), "--policy", "round_robin", "--out", str(tmp_path / "o")],
    )
    assert r.exit_code == 2 and "small.jsonl:301" in r.output
    r = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--policy",
            "round_robin",
            "--skip-bad",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.output


def test_an_unsorted_trace_is_sorted_and_the_run_says_so(tmp_path: Path) -> None:
    """Sorting changes what is replayed (requests on one timestamp keep their file order):
    the loader reports it, and the command must not keep it to itself."""
    p = small_trace(tmp_path)
    lines = p.read_text().splitlines(keepends=True)
    p.write_text("".join(lines[150:] + lines[:150]))
    args = ["simulate", "--trace", str(p), "--policy", "round_robin", "--out", str(tmp_path)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "timestamps were unsorted and have been sorted" in " ".join(r.output.split())
    r = runner.invoke(app, [*args[:2], str(small_trace(tmp_path)), *args[3:]])
    assert r.exit_code == 0 and "warning" not in r.output, r.output


def test_evaluate_refuses_unknown_policy_before_running_anything(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate",
            "--trace",
            str(small_trace(tmp_path)),
            "--policies",
            "round_robin,bogus",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 2 and "bogus" in r.output and not (out / "summary.json").exists()


def test_a_trace_name_is_printed_as_it_is_not_read_as_markup(tmp_path: Path) -> None:
    trace = tmp_path / "run[red]:-1:.jsonl"
    trace.write_text(small_trace(tmp_path).read_text().splitlines(keepends=True)[0])
    out = tmp_path / "o[bold]"
    for cmd in (["simulate", "--policy", "round_robin"], ["evaluate", "--policies", "round_robin"]):
        r = runner.invoke(app, [*cmd, "--trace", str(trace), "--out", str(out)])
        assert r.exit_code == 0, r.output
        assert "run[red]:-1:: 1 request" in r.output
        assert f"wrote {out}/summary.json" in r.output


def test_rejected_requests_are_reported_beside_the_table(tmp_path: Path) -> None:
    """Requests no node can hold have no TTFT and miss the SLO: the table shows '-' and a low
    SLO share, so a warning line says how many were rejected and why."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("node:\n  kv_capacity_gib: 0.5\n")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(small_trace(tmp_path)), "--policy", "round_robin",
            "--config", str(cfg), "--out", str(out)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected"] > 0
    warning = f"round_robin x1: {summary['rejected']} of {summary['requests']} requests rejected"
    assert warning in r.output


def test_no_rejection_warning_when_every_request_is_served(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(small_trace(tmp_path)), "--policy", "round_robin",
            "--out", str(out)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and json.loads((out / "summary.json").read_text())["rejected"] == 0
    assert "rejected" not in r.output


def test_simulate_says_when_it_spreads_a_quantised_traces_arrivals(tmp_path: Path) -> None:
    """``arrival_spread: auto`` rewrites same-timestamp arrivals (a real burst on a coarse
    clock too): said, with the grid step; ``off`` replays them as recorded, silently."""
    lines = [
        json.dumps({"timestamp": t, "input_length": 600, "output_length": 4, "hash_ids": [i, 99]})
        for i, t in enumerate([0, 0, 0, 0, 2000, 2000, 4000, 4000, 4500])
    ]
    trace = tmp_path / "grid.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    args = ["simulate", "--trace", str(trace), "--policy", "round_robin"]
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "note: 89% of the requests share a timestamp" in text and "2,000 ms grid step" in text
    off = tmp_path / "off.yaml"
    off.write_text("arrival_spread: off\n")
    r = CliRunner().invoke(app, [*args, "--config", str(off), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0 and "share a timestamp" not in r.output, r.output


def test_without_a_terminal_long_work_prints_plain_progress_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a progress bar draws nothing (CI logs, nohup), a plain line says how far the
    work is, at most every PLAIN_PROGRESS_EVERY_S (here: every update)."""
    import kvcast.cli.common as common

    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    r = CliRunner().invoke(app, ["simulate", "--trace", "bundled:conversation", "--policy",
                                 "round_robin", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if x.startswith("simulate round_robin: ")]
    assert lines and lines[-1].split(": ")[1].startswith("1,750/1,750 done"), r.output[-2000:]
