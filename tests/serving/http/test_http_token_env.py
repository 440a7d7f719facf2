"""The names of the variables that hold tokens: letters, digits and ``_``, not starting with a
digit (:func:`is_env_name`). A config's ``tenant_tokens[].token_env`` that is not one (the
secret itself, pasted in) stops ``serve sidecar`` and ``serve agent`` in one line naming the
entry by its index and tenants, never showing the value, whatever is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from serve_commands import serve_command
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.serving.http.tenant_tokens import TenantToken
from kvcast.serving.http.token_env import is_env_name

PASTED = ["s3cret-Tok3n+/x=", "s3cret tok", "9s3cret", "", "s3cret\n", "s" + "3cret" * 60]


@pytest.mark.parametrize("name", ["KVCAST_TOKEN", "_x", "kt_acme_2", "A" * 256])
def test_a_variable_name_is_letters_digits_and_underscores_not_starting_with_a_digit(
    name: str,
) -> None:
    assert is_env_name(name)


@pytest.mark.parametrize("value", [*PASTED, "KT-ACME", "A" * 257, "É_TOKEN", None, 5, b"KT"])
def test_anything_else_is_no_variable_name(value: object) -> None:
    assert not is_env_name(value)


def _service(kind: str, tmp_path: Path, token_env: object) -> list[str]:
    """``serve KIND`` with a config whose second tenant token (globex's) has ``token_env``."""
    tokens = [{"tenants": ["acme"], "token_env": "KT_ACME"},
              {"tenants": ["globex"], "token_env": token_env}]  # fmt: skip
    return serve_command(kind, tmp_path, tokens)


NOT_A_NAME = "the entry for tenants ['globex']: its token_env must name an environment variable"


@pytest.mark.parametrize("kind", ["sidecar", "agent"])
@pytest.mark.parametrize(
    ("pasted", "said"),
    [*((p, NOT_A_NAME) for p in PASTED),  # a numeric secret, unquoted, is read as a number
     *((p, "Input should be a valid string") for p in (918273645, 9.18273645, ["s3cret"]))],
)  # fmt: skip
def test_a_token_env_that_is_no_name_is_refused_naming_the_entry_never_the_value(
    tmp_path: Path, kind: str, pasted: object, said: str
) -> None:
    env = {"KVCAST_TOKEN": "shared-tok", "KT_ACME": "acme-tok"}
    r = CliRunner().invoke(app, _service(kind, tmp_path, pasted), env=env)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.count("error:") == 1, r.output
    text = " ".join(r.output.split())
    assert f"key 'tenant_tokens.1.token_env': {said}" in text, text
    assert "s3cret" not in text and "Tok3n" not in text and "18273645" not in text


def test_a_tenant_token_built_in_code_hides_a_pasted_value_from_its_error() -> None:
    with pytest.raises(ValidationError) as err:
        TenantToken(tenants=("acme",), token_env="s3cret-Tok3n+/x=")
    assert "must name an environment variable" in str(err.value)
    assert "s3cret" not in str(err.value)
