"""``kvcast verdict``: the predictive-replication goal, judged from ``evaluate``'s summaries.

One table per SLO: a row per check of the goal, a column per replicating policy, each cell
the measured figure and whether it meets the goal (``ok``, ``MISS``, or ``?`` when the
summaries lack the run it needs: the notes under the table say which).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kvcast.cli.common import (
    out_console,
    user_errors,
    write_json,
)
from kvcast.output_paths import output_file
from kvcast.simulator.goal_config import GoalConfig, load_goal_config
from kvcast.simulator.verdict import CHECKS, GroupVerdict, judge

GoalOpt = Annotated[
    Path | None,
    typer.Option(
        "--goal",
        help="Goal YAML (default: embedded, the predictive-replication issue's goal; "
        "configs/goals/predictive-replication.yaml).",
    ),
]

MARK = {True: "ok", False: "MISS", None: "?"}
STYLE = {True: "green", False: "red", None: "yellow"}
WORD = {True: "met", False: "not met", None: "not measured in full"}


def verdict_tables(groups: Sequence[GroupVerdict], goal: GoalConfig) -> list[Table | Text]:
    """What ``kvcast verdict`` prints: per SLO, a heading, the checks table and its notes."""
    out: list[Table | Text] = []
    for g in groups:
        head = f"goal check{f' [{g.slo}]' if g.slo else ''}: "
        if g.bar is None:
            head += "no bar"
        else:
            bound = {"upper": ">=", "lower": "<"}.get(g.bar_capacity_bound or "", "")
            head += f"bar {g.bar} (capacity x{bound}{g.bar_capacity:.3g})"
            for label, gain in g.oracle_gains.items():
                head += f", {label} gain {gain:+.1%}"
        out.append(Text(head, style="bold"))
        if not g.policies:
            out.append(Text("no replicating policy (oracle, predictive_*) to judge"))
        else:
            out.append(_table(g))
        notes = list(g.notes) + _notes(g)
        out.extend(Text(f"  {n}") for n in notes)
    return out


def _table(g: GroupVerdict) -> Table:
    t = Table(title_justify="left")
    t.add_column("check")
    t.add_column("goal")
    for p in g.policies:
        on = f"\non {p.router}" if p.router else ""
        t.add_column(p.label + on, justify="right")
    present = {c.name for p in g.policies for c in p.checks}
    names = [n for n in CHECKS if n in present]
    for name in names:
        by_policy = [next((c for c in p.checks if c.name == name), None) for p in g.policies]
        goal = next(c.goal for c in by_policy if c is not None)
        cells = [
            Text("") if c is None else Text(f"{c.value} {MARK[c.met]}", style=STYLE[c.met])
            for c in by_policy
        ]
        t.add_row(name, goal, *cells)
    t.add_row(
        Text("verdict", style="bold"), "",
        *(Text(WORD[p.met], style=f"bold {STYLE[p.met]}") for p in g.policies),
    )  # fmt: skip
    return t


def _notes(g: GroupVerdict) -> list[str]:
    """The distinct reasons a check was not measured or was decided by a bound."""
    seen: dict[str, list[str]] = {}
    for p in g.policies:
        for c in p.checks:
            if c.note:
                seen.setdefault(f"{c.name}: {c.note}", []).append(p.label)
    return [f"{n} ({', '.join(who)})" for n, who in seen.items()]


def verdict_json(groups: Sequence[GroupVerdict], goal: GoalConfig) -> dict[str, Any]:
    return {"goal": goal.model_dump(mode="json"), "groups": [g.to_json() for g in groups]}


def print_verdict(
    console: Console,
    summaries: Sequence[dict[str, Any]],
    goal: GoalConfig,
    out: Path,
    unplayable: Mapping[float, str] | None = None,
) -> list[GroupVerdict]:
    """Judge, print the tables, write ``out`` (JSON) and the figure beside it (``.png``); the
    groups judged (``unplayable``: loads the verdict reads that the trace cannot be played
    at, and why)."""
    groups = judge(summaries, goal, unplayable)
    for part in verdict_tables(groups, goal):
        console.print(part)
    write_json(out, verdict_json(groups, goal))
    from kvcast.simulator.verdict_plot import plot_verdict  # matplotlib: lazily

    plot = plot_verdict(groups, out.with_suffix(".png"))
    console.print(escape(f"wrote {out}" + (f", {plot.name}" if plot is not None else "")))
    return groups


@user_errors
def verdict_cmd(
    summary: Annotated[
        Path, typer.Option("--summary", help="summary.json written by kvcast evaluate.")
    ],
    goal: GoalOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Verdict JSON to write, its figure beside it as .png (default: verdict.json "
            "beside the summary).",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 3 unless every replicating policy meets the goal (and one was judged).",
        ),
    ] = False,
) -> None:
    """Judge the replicating policies of an evaluation against the predictive-replication goal.

    Reads what it needs from the summaries: capacities (evaluate --capacity), the bar's
    capacity load and the low load (evaluate --verdict runs both)."""
    cfg = load_goal_config(goal)
    out = out or summary.with_name("verdict.json")
    given = [("--summary", summary), ("--goal", goal)]
    output_file(out, "--out", given)
    output_file(out.with_suffix(".png"), "--out (its figure)", given)
    rows = _read_summaries(summary)
    groups = print_verdict(out_console, rows, cfg, out)
    judged = [p for g in groups for p in g.policies]
    if strict and not (judged and all(p.met for p in judged)):
        if not judged:
            out_console.print("--strict: nothing judged (no oracle or predictive_* policy)")
        raise typer.Exit(3)


def _read_summaries(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"--summary: no such file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--summary: cannot read {path} as JSON: {err}") from None
    rows = data if isinstance(data, list) else [data]
    if not rows:
        raise ValueError(f"--summary: {path} holds no run to judge (an empty list)")
    need = ("policy", "time_scale", "ttft_ms", "bytes_replicated", "bytes_replicated_used",
            "active_evictions_by_speculative", "peak_speculative_bytes_over_quota")  # fmt: skip
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or any(k not in row for k in need):
            lacks = [k for k in need if k not in row] if isinstance(row, dict) else list(need)
            raise ValueError(f"--summary: {path} entry {i} is not a kvcast summary (no "
                             f"{', '.join(lacks)})")  # fmt: skip
    return rows
