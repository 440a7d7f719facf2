"""Shared pieces of the CLI: error reporting, argument parsing, progress, output files."""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvcast.config import ConfigError
from kvcast.data import trace_file
from kvcast.output_paths import forget_made_dirs, remove_unused_dirs

if TYPE_CHECKING:
    from kvcast.features.traces import Trace

console = Console(stderr=True, emoji=False)  # ":-1:" in a value stays as typed
# results: tables and "wrote ..." lines, on stdout (a pipe gets rows 160 wide, not 80)
out_console = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
P = ParamSpec("P")
R = TypeVar("R")

USER_ERRORS = (ConfigError, ValueError, OSError, NotImplementedError)  # TraceError: ValueError


def fail(message: str) -> typer.Exit:
    """Print a one-line reason and return the exit to raise (status 2: bad input)."""
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn bad input into one line and exit status 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        forget_made_dirs()
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as err:
            remove_unused_dirs()  # an --out made for this run and never written into
            raise fail(str(err)) from None
        except KeyboardInterrupt:  # Ctrl-C: said, and the shell's status for SIGINT
            remove_unused_dirs()
            console.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def plural(n: int, noun: str) -> str:
    """``1 request``, ``2 requests`` (thousands separated)."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def check_time_scale(time_scale: float) -> float:
    """``--time-scale`` if a positive finite number, else a ValueError saying so."""
    if not 0 < time_scale < math.inf:
        raise ValueError(f"--time-scale must be a positive finite number, got {time_scale}")
    return time_scale


def parse_floats(text: str, what: str, *, zero_ok: bool = False) -> list[float]:
    """``"1,2,4"`` -> [1.0, 2.0, 4.0]; each must be a positive finite number (or 0 with
    ``zero_ok``)."""
    out = []
    for part in text.split(","):
        try:
            x = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part.strip()!r} is not a number") from None
        if not math.isfinite(x) or x < 0 or (x == 0 and not zero_ok):
            need = "a number >= 0" if zero_ok else "a positive number"
            raise ValueError(f"{what}: {part.strip()!r} must be {need}")
        out.append(x)
    return out


def parse_names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def no_repeats(values: list[Any], what: str) -> None:
    """A ValueError naming the first value given twice (it would run the same work twice and
    write rows that cannot be told apart)."""
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{what}: {v!r} is given twice")
        seen.add(v)


def png_path(path: Path | None, what: str = "--plot") -> Path | None:
    """A plot's path as matplotlib writes it: ``.png`` added when it has no suffix (a
    directory is refused, not written beside as ``DIR.png``)."""
    if path is not None and path.is_dir():
        raise ValueError(f"{what}: {path} is a directory; name a PNG file")
    return path if path is None or path.suffix else path.with_suffix(".png")


JUDGED_FROM_SUMMARY = ("verdict.json", "verdict.png")
"""What ``kvcast verdict`` writes beside a summary: stale once the summary is replaced."""


def fresh_summary(out: Path) -> Path:
    """``out/summary.json``, an earlier run's removed (with the verdict judged from it): a run
    writes its summary last, so that one interrupted while writing (Ctrl-C) leaves no summary
    beside files of two runs."""
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "summary.json"
    for path in (summary, *(out / name for name in JUDGED_FROM_SUMMARY)):
        path.unlink(missing_ok=True)
    return summary


def parse_models(items: list[str] | None) -> dict[str, str]:
    """``--model`` options -> {kind: reference}; one-line errors for bad items. An item is
    ``KIND=PATH_OR_URI``, or a bare ``PATH`` / ``models:/NAME@ALIAS`` whose kind is the one
    the model declares (its ``kvcast.kind`` metadata: the model is opened to read it)."""
    from kvcast.simulator.model_scorer import MODEL_KINDS

    models: dict[str, str] = {}
    for item in items or []:
        kind, sep, ref = item.partition("=")
        kind, ref = kind.strip(), ref.strip()
        if not sep or (kind not in MODEL_KINDS and ("/" in kind or "." in kind)):
            kind, ref = _declared_kind(item.strip()), item.strip()  # a bare reference
        elif not ref:
            raise ValueError(f"--model {item!r}: expected KIND=PATH, KIND=models:/NAME@ALIAS, "
                             "PATH or models:/NAME@ALIAS")  # fmt: skip
        if kind == "recency":  # a known kind, which no model policy scores with
            raise ValueError(
                f"--model {item!r}: a recency model drives no policy (predictive_recency learns "
                f"its own online); give a model of a kind that does: {', '.join(MODEL_KINDS)}"
            )
        if kind not in MODEL_KINDS:
            raise ValueError(
                f"--model {item!r}: unknown kind {kind!r}; valid: {', '.join(MODEL_KINDS)}"
            )
        if kind in models and models[kind] != ref:
            raise ValueError(f"--model {item!r}: a {kind} model was given already "
                             f"({models[kind]}); one per kind")  # fmt: skip
        models[kind] = ref
    return models


def unused_models(models: dict[str, str], policies: list[str]) -> None:
    """A ValueError for a ``--model`` that no policy of the run would score with (it was
    ignored, and the policy of another kind scored with its MLflow champion instead)."""
    for kind, ref in models.items():
        if f"predictive_{kind}" not in policies:
            raise ValueError(
                f"--model {ref}: a model of kind {kind}, but no predictive_{kind} policy runs "
                f"({', '.join(policies)}): add it, or leave the model out"
            )


def _declared_kind(ref: str) -> str:
    """The kind a model file or MLflow URI declares about itself."""
    from kvcast.predictor.scorer import OnnxScorer

    if not ref:
        raise ValueError("--model '': expected a model path or KIND=PATH")
    return OnnxScorer.load(ref).kind


def open_trace(spec: str, fmt: str = "auto", *, skip_bad: bool = False) -> Trace:
    """Load ``PATH`` or ``bundled:NAME`` (a trace sample shipped with kvcast)."""
    from kvcast.features.traces import load_trace  # pandas: only when a command needs it

    if spec.startswith("bundled:"):
        path, name = trace_file(spec)  # ValueError for an unknown name, listing the valid ones
        return load_trace(path, fmt, skip_bad=skip_bad, name=name)
    trace = load_trace(spec, fmt, skip_bad=skip_bad)
    if trace.report.noteworthy:  # what the loader changed, or doubts
        console.print(f"[yellow]warning:[/] {escape(f'{spec}: {trace.report.summary()}')}")
    return trace


PLAIN_PROGRESS_EVERY_S = 30.0  # without a terminal: a progress line at most this often


@contextmanager
def progress_bar(total: int | None, label: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields ``update(done, total)``. Without a terminal (CI
    logs, ``nohup``), where the bar draws nothing, a plain line instead at most every
    ``PLAIN_PROGRESS_EVERY_S`` (a long run is seen to be alive)."""
    if not console.is_terminal:
        started = last = time.monotonic()

        def plain(done: int, total_now: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PLAIN_PROGRESS_EVERY_S:
                last = now
                of = f"/{total_now:,}" if total_now else ""
                console.print(f"{label}: {done:,}{of} done, {now - started:,.0f} s",
                              highlight=False)  # fmt: skip

        yield plain
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)

        def update(done: int, total_now: int) -> None:
            bar.update(task, completed=done, total=total_now)

        yield update


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> Path:
    """Strict JSON (NaN and infinities become null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(obj), indent=2) + "\n")
    return path
