"""``kvcast serve agent`` refuses bad input with one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app

runner = CliRunner()
BASE = ["serve", "agent", "--listen", "127.0.0.1:0", "--transfer-listen", "127.0.0.1:0"]
SIZES = ["--capacity", "64MiB", "--speculative-quota", "8MiB"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speculative-quota", "1MiB"], "--capacity is required"),
        (["--capacity", "1MiB"], "--speculative-quota is required"),
        (["--capacity", "64XB", "--speculative-quota", "1"], "--capacity: '64XB': unknown unit"),
        (["--capacity", "1MiB", "--speculative-quota", "2MiB"], "must not exceed capacity"),
        ([*SIZES, "--listen", "localhost"], "listen: address must be HOST:PORT"),
        (
            [*SIZES, "--transfer-listen", "127.0.0.1:99999"],
            "transfer_listen: port 99999 of '127.0.0.1:99999' is out of range (0-65535)",
        ),
        ([*SIZES, "--log-level", "loud"], "--log-level must be one of"),
        ([*SIZES, "--seed-blocks", "2", "--seed-block-bytes", "2x"], "--seed-block-bytes"),
        ([*SIZES, "--config", "/nonexistent/agent.yaml"], "no such config file"),
        ([*SIZES, "--seed-blocks", "100", "--seed-block-bytes", "1MiB"], "exceed the capacity"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = runner.invoke(app, [*BASE, *args], env={"KVCAST_TOKEN": None})
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_unknown_config_key_is_named_with_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("capacity_bytes: 1GiB\nspeculative_quota_bytes: 1MiB\ncapacty: 3\n")
    r = runner.invoke(app, [*BASE, "--config", str(cfg)], env={"KVCAST_TOKEN": None})
    assert r.exit_code == 2 and "agent.yaml: key 'capacty': unknown key" in r.output


def test_another_services_config_is_named_by_its_unknown_keys(tmp_path: Path) -> None:
    """The sidecar's YAML given to the agent: its keys are what is wrong, not the agent's
    missing sizes."""
    cfg = tmp_path / "sidecar.yaml"
    cfg.write_text("listen: 127.0.0.1:8480\nnodes:\n  - name: a\ntick_ms: 250\n")
    r = runner.invoke(app, ["serve", "agent", "--config", str(cfg)], env={"KVCAST_TOKEN": None})
    assert r.exit_code == 2, r.output
    assert "sidecar.yaml: key 'nodes': unknown key" in r.output, r.output
    assert "is required" not in r.output


def test_empty_token_variable_is_refused() -> None:
    r = runner.invoke(app, [*BASE, *SIZES, "--token-env", "MY_TOKEN"], env={"MY_TOKEN": ""})
    assert r.exit_code == 2 and "MY_TOKEN is set but empty" in r.output


def test_a_token_too_long_for_a_hello_is_refused_naming_its_variable() -> None:
    """The limit is the transfer Hello's: the error names the variable the token came from,
    not the flags given beside it."""
    r = runner.invoke(app, [*BASE, *SIZES, "--token-env", "MY_TOKEN"], env={"MY_TOKEN": "x" * 2049})
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "MY_TOKEN is 2049 bytes, over the 2048" in text, r.output
    assert "xxxx" not in r.output and "command line" not in r.output


def test_address_in_use_is_one_line_and_exit_2() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for flag in ("--listen", "--transfer-listen"):
            args = [*SIZES, flag, f"127.0.0.1:{port}"]
            r = runner.invoke(app, [*BASE, *args], env={"KVCAST_TOKEN": None})
            assert r.exit_code == 2 and "Traceback" not in r.output
            assert "in use" in r.output.lower()
            # the address is named (the HTTP port once said only "[Errno 98] Address ...")
            text = " ".join(r.output.split())
            assert f"'127.0.0.1', {port}" in text or f"127.0.0.1:{port}" in text, r.output


def test_quota_over_capacity_names_both_sizes() -> None:
    args = [*BASE, "--capacity", "1MiB", "--speculative-quota", "2MiB"]
    r = runner.invoke(app, args, env={"KVCAST_TOKEN": None})
    assert r.exit_code == 2 and "2097152" in r.output and "1048576" in r.output, r.output


def test_serve_agent_help_lists_the_flags() -> None:
    r = runner.invoke(app, ["serve", "agent", "--help"])
    assert r.exit_code == 0
    for flag in ("--node-id", "--listen", "--transfer-listen", "--capacity",
                 "--speculative-quota", "--config", "--token-env", "--seed-blocks"):  # fmt: skip
        assert flag in r.output
