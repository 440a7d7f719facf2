"""``--token-env`` and ``--ingest-token-env`` of ``serve sidecar``, ``serve agent``,
``cluster up`` and ``cluster replay``: given, even naming the default variable, an option
whose variable is not set stops the command before anything starts, in one line naming the
option and the variable (exit status 2, no traceback), a token in the config
notwithstanding; left out, the default variable unset means no token, as before; a value that
is no variable's name (a secret pasted in) is refused without being shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcast.cli.app import app

runner = CliRunner()
UNSET = {"KVCAST_TOKEN": None, "KVCAST_INGEST_TOKEN": None, "KT_PROD": None}
COMMANDS = ["serve sidecar", "serve agent", "cluster up", "cluster replay"]
OPTIONS = ["--token-env", "--ingest-token-env"]


def _command(name: str, tmp_path: Path, config: dict | None = None) -> list[str]:
    """``name``'s arguments, with a config file (holding ``config``) for the services."""
    path = tmp_path / "service.yaml"
    if name == "serve sidecar":
        data = {"listen": "127.0.0.1:0", "nodes": [{"name": "a"}], "decision_log": {"path": None}}
        path.write_text(yaml.safe_dump(data | (config or {})))
        return ["serve", "sidecar", "--config", str(path)]
    if name == "serve agent":
        path.write_text(yaml.safe_dump(config or {}))
        return ["serve", "agent", "--config", str(path), "--listen", "127.0.0.1:0",
                "--transfer-listen", "127.0.0.1:0", "--capacity", "64MiB",
                "--speculative-quota", "8MiB"]  # fmt: skip
    if name == "cluster up":
        return ["cluster", "up", "--workdir", str(tmp_path / "cluster")]
    return ["cluster", "replay", "--sidecar", "http://127.0.0.1:1", "--agents",
            "http://127.0.0.1:1"]  # fmt: skip


def _refused(args: list[str], env: dict[str, str | None]) -> str:
    """The one line a refused command printed (exit status 2, no traceback), unwrapped."""
    r = runner.invoke(app, args, env=env)  # type: ignore[arg-type]
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.count("error:") == 1, r.output
    return " ".join(r.output.split())


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("flag", OPTIONS)
@pytest.mark.parametrize("var", ["KT_PROD", "KVCAST_TOKEN", "KVCAST_INGEST_TOKEN"])
def test_an_option_naming_an_unset_variable_stops_the_command_naming_option_and_variable(
    tmp_path: Path, command: str, flag: str, var: str
) -> None:
    """Named on the command line, even the default variable must be set; nothing starts."""
    text = _refused([*_command(command, tmp_path), flag, var], UNSET)
    assert f"error: {flag} {var}: the variable is not set" in text, text
    assert not (tmp_path / "cluster").exists()


@pytest.mark.parametrize("command", ["serve sidecar", "serve agent"])
@pytest.mark.parametrize(("flag", "key"), [("--token-env", "token"),
                                           ("--ingest-token-env", "ingest_token")])  # fmt: skip
def test_a_token_in_the_config_does_not_stand_in_for_an_options_unset_variable(
    tmp_path: Path, command: str, flag: str, key: str
) -> None:
    config = {"token": "config-s3cret-shared", key: f"config-s3cret-{key}"}
    text = _refused([*_command(command, tmp_path, config), flag, "KT_PROD"], UNSET)
    assert f"{flag} KT_PROD: the variable is not set" in text, text
    assert "s3cret" not in text


@pytest.mark.parametrize(
    ("command", "later"),
    [("serve sidecar", "--mode must not be empty"), ("serve agent", "--log-level must be one of"),
     ("cluster up", "none.onnx: no such file"), ("cluster replay", "--router 'nope'")],
)  # fmt: skip
def test_left_out_an_unset_default_variable_means_no_token_as_before(
    tmp_path: Path, command: str, later: str
) -> None:
    """Both defaults unset: the command goes on to its other checks (here one that refuses a
    bad option given for the purpose), not stopped for the token variables."""
    bad = {"serve sidecar": ["--mode", " "], "serve agent": ["--log-level", "loud"],
           "cluster up": ["--model", str(tmp_path / "none.onnx")],
           "cluster replay": ["--router", "nope"]}  # fmt: skip
    text = _refused([*_command(command, tmp_path), *bad[command]], UNSET)
    assert later in text and "the variable is not set" not in text, text


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("flag", OPTIONS)
@pytest.mark.parametrize("value", ["s3cret-Tok3n+/x=", "s3cret tok", "9s3cret", ""])
def test_an_option_value_that_is_no_variable_name_is_refused_never_shown(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    """The secret pasted where its variable's name belongs: the error names the option and
    says what it must be, never the value."""
    text = _refused([*_command(command, tmp_path), flag, value], UNSET)
    assert f"{flag} must name an environment variable" in text, text
    assert "s3cret" not in text and "Tok3n" not in text
