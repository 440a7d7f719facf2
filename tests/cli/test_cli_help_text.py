"""Command help: prose paragraphs are rewrapped to the terminal, not broken where the source
wrapped them; lists, examples and click's ``\\b`` blocks keep their lines."""

from __future__ import annotations

import typer
from typer.models import CommandInfo
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.cli.help_text import unwrap_paragraphs


def test_prose_paragraphs_are_joined_and_lists_examples_and_b_blocks_kept() -> None:
    text = """Summary line
    that goes on.

    A paragraph wrapped
    in the source.

    - an item
    - another

    An example:
        kvcast simulate --trace X

    \b
    kept
    as is"""
    assert unwrap_paragraphs(text).split("\n\n") == [
        "Summary line that goes on.",
        "A paragraph wrapped in the source.",
        "- an item\n- another",
        "An example:\n    kvcast simulate --trace X",
        "\b\nkept\nas is",
    ]


def _commands(group: typer.Typer, prefix: str = "") -> dict[str, CommandInfo]:
    """Every command of ``group`` by its full name, its sub-apps' included."""
    out = {f"{prefix}{c.name}": c for c in group.registered_commands if c.name}
    for g in group.registered_groups:
        if g.typer_instance is not None and g.name:
            out |= _commands(g.typer_instance, f"{prefix}{g.name} ")
    return out


def test_every_commands_help_has_its_prose_on_unbroken_lines() -> None:
    commands = _commands(app)
    assert {"serve agent", "cluster replay", "simulate", "trace agent"} <= set(commands)
    for name, cmd in commands.items():
        assert cmd.help, name
        assert unwrap_paragraphs(cmd.help) == cmd.help, name


def test_a_later_paragraph_is_wrapped_to_the_terminal_not_the_source() -> None:
    result = CliRunner().invoke(app, ["serve", "agent", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    # one line in a wide terminal (the docstring breaks it after "TOKEN".)
    assert 'need "Authorization: Bearer TOKEN". The config\'s tenant_tokens' in result.output
