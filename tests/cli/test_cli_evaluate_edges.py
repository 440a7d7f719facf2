"""``kvcast evaluate`` at the edges: a load the trace cannot be played at is one line naming
it, and a capacity that is only a bound is shown as one (``>=256``, ``<0.0156``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kvcast.cli.app import app
from kvcast.cli.summary_table import capacity_cell
from kvcast.data import bundled_trace_path

runner = CliRunner()
SESSIONS = Path(__file__).resolve().parents[2] / "configs/simulator/session-load.yaml"


@pytest.fixture
def five(tmp_path: Path) -> Path:
    path = tmp_path / "five.jsonl"
    lines = bundled_trace_path("conversation").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]))
    return path


def evaluate(trace: Path, out: Path, *args: str) -> Result:
    return runner.invoke(
        app,
        ["evaluate", "--trace", str(trace), "--policies", "round_robin", "--jobs", "1",
         "--out", str(out), *args],
    )  # fmt: skip


def test_a_sessions_load_drawing_no_session_is_one_line_naming_it(
    five: Path, tmp_path: Path
) -> None:
    r = evaluate(five, tmp_path / "e", "--config", str(SESSIONS), "--time-scale", "1,0.01")
    assert r.exit_code == 2, r.output
    assert "time-scale 0.01 with load_scaling: sessions drew none of the trace's 5 sessions" in (
        " ".join(r.output.split())
    )
    assert "Traceback" not in r.output and not (tmp_path / "e" / "summary.json").exists()


def test_a_sessions_load_too_large_is_one_line(five: Path, tmp_path: Path) -> None:
    r = evaluate(five, tmp_path / "e", "--config", str(SESSIONS), "--time-scale", "1e9")
    assert r.exit_code == 2 and "use a smaller time-scale" in r.output, r.output


def test_capacity_bounds_are_flagged_in_the_table_the_notes_and_summary(
    five: Path, tmp_path: Path
) -> None:
    out = tmp_path / "e"
    r = evaluate(five, out, "--capacity", "--slo", "absolute:10000000", "--slo", "absolute:1")
    assert r.exit_code == 0, r.output
    assert ">=256" in r.output and "<0.0156" in r.output
    assert "capacity of round_robin [absolute 1e+07 ms]: at least x256" in r.output
    assert "capacity of round_robin [absolute 1 ms]: below x0.015625" in r.output
    rows = json.loads((out / "summary.json").read_text())
    assert [(s["capacity_time_scale"], s["capacity_bound"]) for s in rows] == [
        (256.0, "upper"),
        (0.0, "lower"),
    ]


def test_capacity_cell_renders_bounds_and_plain_values() -> None:
    assert capacity_cell({"capacity_time_scale": 256.0, "capacity_bound": "upper"}) == ">=256"
    low = {"capacity_time_scale": 0.0, "capacity_bound": "lower", "capacity_bound_time_scale": 0.5}
    assert capacity_cell(low) == "<0.5"
    assert capacity_cell({"capacity_time_scale": 2.25, "capacity_bound": None}) == "2.25"
    assert capacity_cell({"capacity_time_scale": 1.5}) == "1.5"  # a summary from before bounds


def test_a_rate_over_no_time_is_shown_as_a_dash_not_nan(five: Path, tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(five.read_text().splitlines(keepends=True)[0])
    r = evaluate(one, tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert "nan" not in r.output.lower()
