"""``verdict.png``: the goal check at a glance. One panel per check measured as a share (the
capacity gain, the share of the oracle's gain, P50 / P99 TTFT at the bar's capacity, the
bytes never used, P50 / P99 at low load), a bar per replicating policy coloured by its
judgment (met, missed, not measured: no bar) and the goal's limit as a dashed line; one row
of panels per SLO. The counts that must be zero (active evictions, quota overruns) stay in
the table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import PercentFormatter

from kvcast.simulator.verdict import Check, GroupVerdict

PANELS = (
    ("capacity_gain", "capacity gain over the bar"),
    ("oracle_share", "capacity gain (need: share of the oracle's)"),
    ("p50_at_capacity", "P50 TTFT at the bar's capacity, vs the bar"),
    ("p99_at_capacity", "P99 TTFT at the bar's capacity, vs the bar"),
    ("waste", "bytes copied never used"),
    ("low_load_p50", "P50 TTFT at low load, vs its router"),
    ("low_load_p99", "P99 TTFT at low load, vs its router"),
)
COLOURS = {True: "tab:green", False: "tab:red", None: "lightgrey"}
COLUMNS = 4


def plot_verdict(groups: Sequence[GroupVerdict], path: Path) -> Path | None:
    """Write the figure to ``path``; None (nothing written) when no policy was judged."""
    groups = [g for g in groups if g.policies]
    if not groups:
        return None
    rows_per_group = math.ceil(len(PANELS) / COLUMNS)
    width = max(3.2, 0.5 * max(len(g.policies) for g in groups) + 1.6)
    fig = plt.figure(
        figsize=(COLUMNS * width, 3.2 * rows_per_group * len(groups)), layout="constrained"
    )
    for sub, g in zip(fig.subfigures(len(groups), 1, squeeze=False)[:, 0], groups, strict=True):
        cells = sub.subplots(rows_per_group, COLUMNS, squeeze=False).ravel()
        for ax, (name, title) in zip(cells, PANELS, strict=False):
            _panel(ax, g, name, title)
        for ax in cells[len(PANELS) :]:
            ax.axis("off")
        head = f"bar: {g.bar} (capacity x{g.bar_capacity:.3g})" if g.bar else "no bar"
        sub.suptitle((f"[{g.slo}] " if g.slo else "") + head, fontweight="bold")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel(ax: plt.Axes, g: GroupVerdict, name: str, title: str) -> None:
    checks: list[tuple[str, Check | None]] = [
        (p.label + (f"\non {p.router}" if p.router else ""),
         next((c for c in p.checks if c.name == name), None))
        for p in g.policies
    ]  # fmt: skip
    xs = range(len(checks))
    heights = [c.measured if c is not None and c.measured is not None else 0.0 for _, c in checks]
    colours = [COLOURS[c.met] if c is not None else "white" for _, c in checks]
    ax.bar(xs, heights, color=colours, edgecolor="black", linewidth=0.5)
    shown = [(x, h, col) for x, h, col, (_, c) in zip(xs, heights, colours, checks, strict=True)
             if c is not None and c.measured is not None]  # fmt: skip
    if shown:  # a marker too, so that a figure of 0 shows
        mx, my, mc = zip(*shown, strict=True)
        ax.scatter(mx, my, c=mc, edgecolors="black", linewidths=0.5, marker="D", zorder=3)
    for x, (_, c) in zip(xs, checks, strict=True):
        if c is not None and c.measured is None:
            ax.text(x, 0, "?", ha="center", va="bottom", fontsize=9)
    limits = {c.limit for _, c in checks if c is not None and c.limit is not None}
    for limit in limits:  # one per quota for the oracle's share; else one
        ax.axhline(limit, color="black", linestyle="--", linewidth=1)
    ax.axhline(0, color="grey", linewidth=0.5)
    goal = next((c.goal for _, c in checks if c is not None), "")
    ax.set_title(f"{title}\n(goal: {goal})", fontsize=8)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xticks(list(xs), [label for label, _ in checks], rotation=30, ha="right", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
