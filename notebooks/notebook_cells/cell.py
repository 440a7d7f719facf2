"""A notebook cell as the generator takes it: its kind and its source."""

from __future__ import annotations

Cell = tuple[str, str]  # ("md" | "py" | "params", source)


def md(text: str) -> Cell:
    return ("md", text.strip("\n"))


def py(text: str) -> Cell:
    return ("py", text.strip("\n"))


def params(text: str) -> Cell:
    """The notebook's parameters: a code cell tagged ``parameters`` (papermill's ``-p NAME
    VALUE`` overrides them; by hand, edit the cell)."""
    return ("params", text.strip("\n"))
