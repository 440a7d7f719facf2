"""Command help as the terminal should show it: docstrings are wrapped for the source at 94-100
columns, and Typer keeps the single line breaks of every paragraph after the first, so they
would show as lines broken mid-sentence at whatever width the terminal has. Each paragraph of
prose is joined into one line (rich wraps it to the terminal); a paragraph with a list item or
an indented line (an example) keeps its breaks, as does one marked ``\\b`` (click's
"do not rewrap")."""

from __future__ import annotations

import inspect

import typer


def unwrap_paragraphs(text: str) -> str:
    """``text`` with each prose paragraph on one line."""
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        lines = para.split("\n")
        keep = para.startswith("\b") or any(
            line[:1].isspace() or line.lstrip().startswith(("- ", "* ")) for line in lines
        )
        out.append(para if keep else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def tidy_help(app: typer.Typer) -> None:
    """Unwrap the help of every command and group of ``app``, its sub-apps' included."""
    for cmd in app.registered_commands:
        text = cmd.help or (inspect.getdoc(cmd.callback) if cmd.callback else None)
        if text:
            cmd.help = unwrap_paragraphs(text)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)
