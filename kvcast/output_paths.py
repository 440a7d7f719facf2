"""Where a command writes, checked before it does any work: a file or a directory that can be
written, never one of the command's own inputs, and an error that names the flag or key and
the path in the way (not an errno after minutes of replay). The directories made for that are
remembered, so that a command that then fails can remove those it left empty
(:func:`remove_unused_dirs`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["forget_made_dirs", "output_dir", "output_file", "remove_unused_dirs"]

_made: list[Path] = []  # directories output_dir made, in the order made


def output_dir(out: Path, what: str = "--out") -> Path:
    """``out`` as a directory ready to write into, checked before any long work: the error
    names ``what`` (the flag or key) and the path in the way."""
    missing: list[Path] = []  # the directories to make, innermost first
    for d in (out, *out.parents):  # up to the first that exists: a file where one must be?
        if not d.exists():
            missing.append(d)
            continue
        if not d.is_dir():
            if d == out:
                raise ValueError(f"{what}: {out} exists and is not a directory")
            raise ValueError(f"{what}: {d} is a file, not a directory (in {out})")
        break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{what}: cannot create {out}: {err.strerror}") from None
    _made.extend(reversed(missing))  # outermost first
    if not os.access(out, os.W_OK):
        raise ValueError(f"{what}: {out} is not writable")
    return out


def output_file(path: Path, what: str, inputs: Iterable[tuple[str, Path | None]] = ()) -> Path:
    """``path`` checked as a file to write, before any work: not a directory, its directory
    made (:func:`output_dir`), and none of ``inputs`` (flag, path): writing over the command's
    own input would lose it."""
    if path.is_dir():
        raise ValueError(f"{what}: {path} is a directory, not a file")
    for flag, given in inputs:
        if given is not None and _same_file(path, given):
            raise ValueError(f"{what}: {path} is the input given as {flag}; writing it would "
                             "destroy it: name another file")  # fmt: skip
    output_dir(path.parent, what)
    return path


def _same_file(a: Path, b: Path) -> bool:
    """The same file, however named (``sub/../x`` before ``sub`` exists, a link, a hard
    link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def remove_unused_dirs() -> None:
    """Remove the directories :func:`output_dir` made that are still empty, innermost first
    (a command that failed before writing leaves no empty ``--out`` behind); forget them."""
    while _made:
        with contextlib.suppress(OSError):  # not empty (written into), or gone already
            _made.pop().rmdir()


def forget_made_dirs() -> None:
    """A command starts, or ended well: the directories made so far are not its to remove."""
    _made.clear()
