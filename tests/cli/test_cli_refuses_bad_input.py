"""Bad or odd input to the commands: one line naming the value or the file, exit 2, and no
work done first that the error then throws away."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvcast.cli.evaluate as evaluate_cli
import kvcast.cli.simulate as simulate_cli
from kvcast.cli.app import app
from kvcast.data import bundled_trace_path

runner = CliRunner()


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    lines = bundled_trace_path("conversation").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:50]))
    return path


def refused(args: list[str], needle: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--policies", ","], "no policy to run"),
        (["--policies", "round_robin,round_robin"], "'round_robin' is given twice"),
        (["--policies", "round_robin", "--time-scale", "1,1"], "--time-scale: 1.0 is given twice"),
        (["--policies", "round_robin", "--slo", "absolute:2000", "--slo", "absolute:2000"],
         "--slo"),
    ],
)  # fmt: skip
def test_evaluate_refuses_an_empty_or_repeated_list(
    small: Path, tmp_path: Path, extra: list[str], needle: str
) -> None:
    refused(["evaluate", "--trace", str(small), "--out", str(tmp_path / "e"), *extra], needle)


def test_an_unusable_out_is_found_before_any_simulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    ran: list[int] = []
    monkeypatch.setattr(evaluate_cli, "evaluate", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(simulate_cli, "run_simulation", lambda *a, **k: ran.append(1))
    refused(["evaluate", "--trace", "bundled:conversation", "--policies", "round_robin",
             "--out", str(afile)], "exists and is not a directory")  # fmt: skip
    refused(["simulate", "--trace", "bundled:conversation", "--policy", "round_robin",
             "--out", str(afile)], "exists and is not a directory")  # fmt: skip
    assert ran == []


def test_a_config_that_is_not_utf8_or_not_a_mapping_is_named(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"\xff\xfe: 1\n")
    refused(["simulate", "--trace", "bundled:conversation", "--policy", "round_robin",
             "--config", str(latin)], "latin1.yaml: not UTF-8")  # fmt: skip
    for text in ("- 1\n", "data: 5\n"):
        listed = tmp_path / "c.yaml"
        listed.write_text(text)
        refused(["train", "--config", str(listed), "--no-track"], "c.yaml")


def test_numbers_that_cannot_be_used_are_refused_naming_the_option(small: Path) -> None:
    refused(["trace", "agent", "--seed", "-1", "--out", "x.jsonl"], "--seed")
    refused(["trace", "reuse", "--trace", str(small), "--window-s", "inf"], "--window-s")
    refused(["trace", "reuse", "--trace", str(small), "--idle-s", "0,nan"], "--idle-s")
    refused(["shadow-eval", "--decisions", "x.parquet", "--trace", str(small), "--spread", "inf"],
            "--spread")  # fmt: skip


def test_a_plot_path_without_a_suffix_is_reported_as_written(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["trace", "reuse", "--trace", str(small), "--plot", "hazard"])
    assert r.exit_code == 0 and "plot: hazard.png" in r.output, r.output
    assert (tmp_path / "hazard.png").is_file()


@pytest.mark.parametrize(
    "content", [b"\xff\xfe{}", b'{"sidecar": 1, "nodes": 5}', b'{"nodes": [{"name": "a"}]}']
)
def test_a_bad_cluster_file_is_named(tmp_path: Path, content: bytes) -> None:
    from kvcast.serving.cluster.layout import read_layout

    (tmp_path / "cluster.json").write_bytes(content)
    with pytest.raises(ValueError, match=r"cluster\.json"):
        read_layout(tmp_path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "give --config FILE (configs/train/*.yaml) or --kind KIND"),
        (["--kind", "rule", "--config", "x.yaml"], "not both"),
        (["--kind", "xgboost"], "--kind must be one of recency, rule, lgbm, tcn, got 'xgboost'"),
    ],
)
def test_train_takes_a_config_or_a_kind(args: list[str], needle: str) -> None:
    refused(["train", *args, "--no-track"], needle)


def test_train_with_a_kind_runs_on_embedded_defaults(tmp_path: Path, monkeypatch) -> None:
    """`kvcast train --kind recency` needs no config file: it works outside the repository
    and writes where `kvcast cluster up` looks for its model."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["train", "--kind", "recency", "--no-track"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "kvcast-out/train/recency/model.onnx").is_file()


def test_an_error_line_shows_the_value_as_typed_never_an_emoji(small: Path, tmp_path: Path) -> None:
    # rich reads ':-1:' as the thumbs-down emoji code: the reason must show what was typed
    refused(["evaluate", "--trace", str(small), "--policies", "round_robin", "--slo",
             "length_aware:-1:2", "--out", str(tmp_path / "e")], "length_aware:-1:2")  # fmt: skip


def test_features_checks_its_out_before_the_replay(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcast.cli.features as features_cli

    afile = tmp_path / "afile"
    afile.write_text("x")
    ran: list[int] = []
    monkeypatch.setattr(features_cli, "record_events", lambda *a, **k: ran.append(1))
    refused(["features", "--trace", str(small), "--out", str(afile)],
            f"--out: {afile} exists and is not a directory")  # fmt: skip
    assert ran == []


def test_a_shadow_log_path_that_cannot_be_a_file_is_refused_naming_the_option(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []
    monkeypatch.setattr(simulate_cli, "run_simulation", lambda *a, **k: ran.append(1))
    afile = tmp_path / "afile"
    afile.write_text("x")
    adir = tmp_path / "adir"
    adir.mkdir()
    args = ["simulate", "--trace", str(small), "--policy", "oracle", "--out", str(tmp_path / "o")]
    refused([*args, "--shadow-log", str(adir)], f"--shadow-log: {adir} is a directory")
    refused([*args, "--shadow-log", str(afile / "d.parquet")],
            f"--shadow-log: {afile} exists and is not a directory")  # fmt: skip
    assert ran == [] and not any(p.name.startswith("adir.") for p in tmp_path.iterdir())


def test_shadow_eval_and_train_print_values_as_typed() -> None:
    """Their consoles, like the others', never turn ':-1:' into an emoji."""
    from kvcast.cli import cluster, shadow, train

    for console in (shadow.out_console, train.out_console, cluster.out):
        with console.capture() as got:
            console.print("length_aware:-1:2")
        assert got.get().strip() == "length_aware:-1:2"


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("sidecar", "--mode", "Active"),
        ("sidecar", "--listen", "127.0.0.1"),
        ("agent", "--listen", "127.0.0.1"),
        ("agent", "--device", "gpu"),
    ],
)
def test_a_bad_flag_over_a_serve_config_is_blamed_on_the_flag(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    """The flag's value was refused under the config file's name alone (``sidecar.yaml: key
    'mode': ... got 'Active'``), sending the reader to a file that holds ``mode: shadow``."""
    config = tmp_path / f"{command}.yaml"
    config.write_text(
        "nodes: [{name: gpu-0}]\ndecision_log: {path: null}\n" if command == "sidecar"
        else "capacity_bytes: 1048576\nspeculative_quota_bytes: 0\n"
    )  # fmt: skip
    r = runner.invoke(app, ["serve", command, "--config", str(config), flag, value],
                      env={"KVCAST_TOKEN": None})  # fmt: skip
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    line = " ".join(r.output.split())
    assert f"{config} with command line ({flag}):" in line and repr(value) in line, r.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["trace", "reuse", "--idle-s", "1,1"], "--idle-s: 1.0 is given twice"),
        (["trace", "reuse", "--window-s", "1e308"], "--window-s must be a finite number"),
        (["quickstart", "--policies", "dynamo_kv,dynamo_kv"], "'dynamo_kv' is given twice"),
    ],
)
def test_repeated_or_overflowing_values_are_refused_before_any_work(
    small: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    if args[0] == "trace":
        args = [*args, "--trace", str(small)]
    else:  # the quickstart would train first: refused before it
        args = [*args, "--out", str(tmp_path / "qs")]
    refused(args, needle)
    assert not (tmp_path / "qs" / "train").exists()


def test_a_missing_trace_names_the_bundled_samples_not_the_formats(tmp_path: Path) -> None:
    refused(["simulate", "--trace", str(tmp_path / "nope.jsonl"), "--policy", "round_robin"],
            "no such trace file (or bundled:NAME for a bundled sample)")  # fmt: skip
