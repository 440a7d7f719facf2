"""``kvcast evaluate`` over SLOs and speculative budgets, in worker processes, and
``kvcast quickstart`` end to end (training, ONNX export, the model policies) on a small trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sample_trace import head
from typer.testing import CliRunner

from kvcast.cli.app import app

runner = CliRunner()


def test_evaluate_sweeps_slos_and_quotas_for_replicating_policies_only(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 300)), "--policies", "dynamo_kv,oracle",
            "--time-scale", "2", "--slo", "length_aware", "--slo", "absolute:1500",
            "--quota-gib", "8,32", "--jobs", "2", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "summary.json").read_text())
    got = [(s["policy"], s["slo_label"], s.get("speculative_quota_gib")) for s in rows]
    assert got == [
        ("dynamo_kv", "length-aware 100 ms + 2x", None),
        ("dynamo_kv", "absolute 1500 ms", None),
        ("oracle", "length-aware 100 ms + 2x", 8.0),
        ("oracle", "length-aware 100 ms + 2x", 32.0),
        ("oracle", "absolute 1500 ms", 8.0),
        ("oracle", "absolute 1500 ms", 32.0),
    ]
    assert rows[1]["slo"] == {"ttft_ms": 1500.0}
    # the same runs judged by two SLOs: same TTFTs, different attainment rules
    assert rows[0]["ttft_ms"] == rows[1]["ttft_ms"]
    for png in ("ttft_cdf.png", "p99_vs_load.png", "goodput_vs_load.png"):
        assert (out / png).stat().st_size > 1000
    if any(s["bytes_replicated"] for s in rows):
        assert (out / "replication.png").is_file() and (out / "waste_vs_budget.png").is_file()
        assert (out / "copy_fates.png").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "absolute"], "--slo 'absolute': expected"),
        (["--slo", "absolute:-5"], "ttft_ms"),
        (["--quota-gib", "x"], "--quota-gib: 'x' is not a number"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--quota-gib", "-1"], "--quota-gib: '-1' must be a number >= 0"),
        (["--quota-gib", "1,1.0000001"], "read the same at 6 significant digits"),
        (["--time-scale", "1e-300"], "time-scale 1e-300 stretches the trace"),
        (["--model", "lgbm"], "lgbm: no such model file"),  # a bare reference: a path
        (["--model", "lgbm="], "expected KIND=PATH"),
        (["--model", "xgb=a.onnx"], "unknown kind 'xgb'"),
        (["--model", "recency=a.onnx"], "a recency model drives no policy"),
        (["--policies", "predictive_lgbm", "--model", "lgbm=nope.onnx"], "no such model file"),
    ],
)
def test_bad_sweep_options_give_one_line_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    r = runner.invoke(
        app, ["evaluate", "--trace", str(head(tmp_path, 50)), *args, "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_a_zero_speculative_quota_is_a_point_of_the_sweep(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 100)), "--policies", "oracle",
            "--quota-gib", "0,8", "--jobs", "1", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "summary.json").read_text())
    assert [s["speculative_quota_gib"] for s in rows] == [0.0, 8.0]
    assert rows[0]["bytes_replicated"] == 0


def test_quickstart_reports_each_models_equal_mass_ece_beside_its_ece(tmp_path: Path) -> None:
    """Training records ``ece_quantile`` beside ``ece``; quickstart's line per model showed
    ``ece`` only."""
    out = tmp_path / "qs"
    r = runner.invoke(
        app,
        [
            "quickstart", "--trace", str(head(tmp_path, 600)), "--no-track", "--jobs", "1",
            "--policies", "dynamo_kv", "--time-scale", "1", "--no-capacity", "--out", str(out),
        ],
        terminal_width=400,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    for kind in ("rule", "lgbm"):
        test = json.loads((out / "train" / kind / "metrics.json").read_text())["test"]
        assert (
            f"trained {kind}: test PR-AUC {test['pr_auc']:.3f}, ECE {test['ece']:.3f} "
            f"(equal-width bins; equal-mass: {test['ece_quantile']:.3f})"
        ) in text


def test_quickstart_trains_and_compares_the_model_policies(tmp_path: Path) -> None:
    out = tmp_path / "qs"
    r = runner.invoke(
        app,
        [
            "quickstart", "--trace", str(head(tmp_path, 600)), "--no-track", "--jobs", "1",
            "--policies", "dynamo_kv,predictive_rule,predictive_lgbm", "--time-scale", "2",
            "--no-capacity", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    for kind in ("rule", "lgbm"):
        assert (out / "train" / kind / "model.onnx").stat().st_size > 0
    rows = json.loads((out / "summary.json").read_text())
    assert [s["policy"] for s in rows] == ["dynamo_kv", "predictive_rule", "predictive_lgbm"]
    assert all(s["time_scale"] == 2.0 for s in rows)
    assert all(s["peak_speculative_bytes_over_quota"] == 0 for s in rows)
    assert all(s["active_evictions_by_speculative"] == 0 for s in rows)
    # a bare model reference picks the policy of the kind the model declares
    models = [str(out / "train" / kind / "model.onnx") for kind in ("lgbm", "rule")]
    again = tmp_path / "again"
    r = runner.invoke(
        app,
        [
            "evaluate", "--trace", str(head(tmp_path, 300)), "--policies", "all", "--jobs", "1",
            "--model", models[0], "--model", models[1], "--time-scale", "2", "--out", str(again),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    ran = [s["policy"] for s in json.loads((again / "summary.json").read_text())]
    assert {"predictive_rule", "predictive_lgbm"} <= set(ran) and "predictive_tcn" not in ran
    twice = ["--model", models[0], "--model", f"lgbm={models[1]}"]  # the lgbm file, the rule
    r = runner.invoke(
        app, ["evaluate", "--trace", str(head(tmp_path, 50)), *twice, "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "a lgbm model was given already" in r.output
