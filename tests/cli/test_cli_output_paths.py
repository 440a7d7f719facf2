"""Where a command writes is checked before it works: an output that is one of the command's
own inputs is refused (writing it would destroy the input), and a file where a directory must
be (or the reverse) is one line naming the flag and the path in the way, with no replay first;
nothing the user had is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from sample_trace import head
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.output_paths import output_dir, output_file

runner = CliRunner()


def refused(args: list[str], *needles: str) -> str:
    r = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    for needle in needles:
        assert needle in out, out
    assert "Traceback" not in r.output and "Errno" not in r.output
    return out


@pytest.mark.parametrize("flag", ["--out", "--outcomes", "--plot"])
def test_shadow_eval_refuses_to_write_over_its_decision_log(tmp_path: Path, flag: str) -> None:
    log = tmp_path / "decisions.parquet"
    log.write_bytes(b"PAR1 the user's decision log")
    trace = head(tmp_path, 20)
    target = log if flag != "--plot" else log.with_suffix(".png")
    if flag == "--plot":  # a plot named as the log gets .png: refused when that is an input
        target.write_bytes(b"x")
        args = ["--trace", str(target)]
    else:
        args = ["--trace", str(trace)]
    refused(["shadow-eval", "--decisions", str(log), *args, flag, str(target)],
            f"{flag}: {target} is the input given as")  # fmt: skip
    assert log.read_bytes() == b"PAR1 the user's decision log"


def test_verdict_refuses_to_write_over_its_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    summary.write_text("[]")
    refused(["verdict", "--summary", str(summary), "--out", str(summary)],
            "is the input given as --summary")  # fmt: skip
    assert summary.read_text() == "[]"


def test_trace_synth_refuses_to_write_over_its_source(tmp_path: Path) -> None:
    trace = head(tmp_path, 20)
    before = trace.read_text()
    refused(["trace", "synth", "--trace", str(trace), "--scale", "2", "--out", str(trace)],
            "--out", "is the input given as --trace")  # fmt: skip
    assert trace.read_text() == before


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--policy", "round_robin", "--out", "{file}/sub"],
        ["score", "--model", "m.onnx", "--out", "{file}"],
        ["trace", "reuse", "--json", "{file}/x.json"],
        ["trace", "reuse", "--plot", "{file}/x.png"],
        ["trace", "synth", "--out", "{file}/x.jsonl"],
    ],
)
def test_a_file_where_a_directory_must_be_is_named_before_any_work(
    tmp_path: Path, args: list[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("the user's file")
    trace = head(tmp_path, 20)
    argv = [a.replace("{file}", str(afile)) for a in args]
    if argv[0] == "trace":
        argv[2:2] = ["--trace", str(trace)]
    else:
        argv[1:1] = ["--trace", str(trace)]
    flag = next(a for a in argv if a in ("--out", "--json", "--plot"))
    refused(argv, f"{flag}: {afile}", "not a directory")
    assert afile.read_text() == "the user's file"


def test_the_checks_name_the_flag_and_refuse_a_directory_as_a_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--out: .* is a directory, not a file"):
        output_file(tmp_path, "--out")
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(ValueError, match=rf"out_dir: {afile} is a file, not a directory"):
        output_dir(afile / "a" / "b", "out_dir")
    assert not (afile / "a").exists() and afile.read_text() == "x"
    made = output_file(tmp_path / "new" / "x.json", "--json", [("--trace", None)])
    assert made.parent.is_dir()


@pytest.mark.parametrize("cmd", [["trace", "synth", "--trace", "{trace}"], ["trace", "agent"]])
def test_a_mooncake_trace_is_written_under_a_jsonl_name_only(
    tmp_path: Path, cmd: list[str]
) -> None:
    trace = head(tmp_path, 20)
    out = tmp_path / "t.parquet"
    refused([a.replace("{trace}", str(trace)) for a in cmd] + ["--out", str(out)],
            f"--out: {out} must end in .jsonl or .jsonl.gz")  # fmt: skip
    assert not out.exists()


def test_verdict_on_a_summary_without_runs_is_refused(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    summary.write_text("[]")
    refused(["verdict", "--summary", str(summary)], "holds no run to judge")
    assert not (tmp_path / "verdict.json").exists()


def test_a_plot_named_as_a_directory_is_refused_not_written_beside_it(tmp_path: Path) -> None:
    adir = tmp_path / "adir"
    adir.mkdir()
    refused(["trace", "reuse", "--trace", str(head(tmp_path, 20)), "--plot", str(adir)],
            f"--plot: {adir} is a directory")  # fmt: skip
    assert not adir.with_suffix(".png").exists()


def test_an_input_named_another_way_is_still_refused(tmp_path: Path) -> None:
    trace = head(tmp_path, 20)
    before = trace.read_text()
    roundabout = tmp_path / "sub" / ".." / trace.name  # sub/ does not exist yet
    refused(["trace", "synth", "--trace", str(trace), "--scale", "2", "--out", str(roundabout)],
            "is the input given as --trace")  # fmt: skip
    assert trace.read_text() == before


@pytest.mark.parametrize(
    "cmd",
    [
        ["simulate", "--trace", "{missing}", "--policy", "round_robin"],
        ["evaluate", "--trace", "{missing}", "--policies", "round_robin"],
        ["features", "--trace", "{missing}"],
    ],
)
def test_a_command_that_fails_leaves_no_empty_output_directory_it_made(
    tmp_path: Path, cmd: list[str]
) -> None:
    """The directories made for ``--out`` (its parents too) go when the command fails before
    writing into them; one that was there before stays."""
    args = [a.replace("{missing}", str(tmp_path / "nope.jsonl")) for a in cmd]
    made = tmp_path / "new" / "deeper"
    r = CliRunner().invoke(app, [*args, "--out", str(made)])
    assert r.exit_code == 2 and "no such trace" in r.output, r.output
    assert not (tmp_path / "new").exists()
    there = tmp_path / "there"
    there.mkdir()
    r = CliRunner().invoke(app, [*args, "--out", str(there)])
    assert r.exit_code == 2 and there.is_dir()
