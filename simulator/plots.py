"""Plots of an evaluation: TTFT CDFs, P99 TTFT / SLO attainment / goodput against load, and the
replicating policies' hit rate, lead time and wasted bytes (against load and against the
speculative budget)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import Locator, MaxNLocator, NullFormatter

from kvcast.simulator.evaluation import Evaluation, task_key, task_label


def label_of(s: dict[str, Any]) -> str:
    """The policy, plus its SLO / speculative budget when the evaluation swept them."""
    return task_label(*task_key(s))


def _by_label(ev: Evaluation) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for s in ev.summaries:
        by.setdefault(label_of(s), []).append(s)
    return {k: sorted(v, key=lambda s: s["time_scale"]) for k, v in by.items()}


# the mantissas of a log axis's labelled ticks, sparsest first: the first giving
# _MIN_LABELS ticks in view is used
_MANTISSAS = (
    (1,),
    (1, 3),
    (1, 2, 5),
    (1, 1.5, 2, 3, 5, 7),
    (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9),
    (*(1 + i / 10 for i in range(10)), 2, 2.2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9),
)
_MIN_LABELS = 5


class _SecondsTicks(Locator):
    """The labelled ticks of a log axis: ``m x 10^k`` for the sparsest set of mantissas ``m``
    that puts at least five ticks in view (1, 10, 100 over decades; 12, 15, 20, 30 within one),
    so that every part of the plotted range has a label near it. matplotlib's own picked 20,
    30, 40 for a view of 10.3 to 48 s, leaving the curves at 11 to 19 s unlabelled."""

    def __call__(self) -> list[float]:
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        lo, hi = sorted((vmin, vmax))
        if not (lo > 0 and math.isfinite(hi)):
            return []
        ticks: list[float] = []
        for mantissas in _MANTISSAS:
            ticks = [t for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                     for m in mantissas if lo <= (t := float(f"{m:g}e{k}")) <= hi]  # fmt: skip
            if len(ticks) >= _MIN_LABELS:
                return ticks
        if len(ticks) >= 2:
            return ticks
        return [float(f"{t:.6g}") for t in MaxNLocator(4).tick_values(lo, hi) if lo <= t <= hi]


def _plain(x: float, pos: int | None = None) -> str:
    return f"{x:g}"


def _log_seconds(ax: Any, which: str) -> None:
    """A log scale on ``ax``'s ``which`` ("x" or "y") axis, labelled in plain numbers ("12",
    "0.5", not "1.2 x 10^1") densely enough that each part of the plotted range has one."""
    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(_SecondsTicks())
    axis.set_major_formatter(_plain)
    axis.set_minor_formatter(NullFormatter())  # the minor ticks: marks between the labels


LINE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))  # one per 10 colours


def line_styles(names: list[str]) -> dict[str, dict[str, str]]:
    """A colour, line style and marker for each of ``names`` (in their order), no two alike:
    matplotlib's 10 colours repeat from the 11th line, and an evaluation of every router
    draws 12 or more (round_robin looked like aibrix_prefix)."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    out = {}
    for i, name in enumerate(names):
        linestyle, marker = LINE_STYLES[(i // len(colours)) % len(LINE_STYLES)]
        out[name] = {"color": colours[i % len(colours)], "linestyle": linestyle, "marker": marker}
    return out


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_ttft_cdf(ev: Evaluation, path: Path, time_scale: float | None = None) -> Path:
    """One CDF per policy at ``time_scale`` (default: load 1 if evaluated, else the lowest)."""
    scales = sorted({x for _, x in ev.ttft})
    if time_scale is None:
        time_scale = 1.0 if 1.0 in scales else scales[0]
    x_sel = time_scale
    fig, ax = plt.subplots(figsize=(7, 4.5))
    style = line_styles(list(_by_label(ev)))
    rejected = {(label_of(s), s["time_scale"]): s for s in ev.summaries if s.get("rejected")}
    for (name, x), ttft in ev.ttft.items():
        if x != x_sel or ttft.empty:
            continue
        v = np.sort(ttft.to_numpy() / 1e3)
        look = style.get(name, {})
        s = rejected.get((name, x))  # no TTFT: left out of the CDF, which must say so
        label = f"{name} ({s['rejected']} of {s['requests']} rejected)" if s else name
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label, color=look.get("color"),
                linestyle=look.get("linestyle", "-"))  # fmt: skip
    _log_seconds(ax, "x")
    ax.set_xlabel("TTFT (s, log)")
    ax.set_ylabel("fraction of served requests")
    ax.set_title(f"TTFT CDF at time-scale {x_sel:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_p99_vs_load(ev: Evaluation, path: Path) -> Path:
    """P99 TTFT and SLO attainment against time-scale, one line per policy."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    groups = _by_label(ev)
    style = line_styles(list(groups))
    for name, rows in groups.items():
        xs = [s["time_scale"] for s in rows]
        ax1.plot(xs, [s["ttft_ms"]["p99"] / 1e3 for s in rows], label=name, **style[name])
        ax2.plot(xs, [s["slo_attainment"] for s in rows], label=name, **style[name])
    ax1.set_xlabel("time-scale (load multiplier)")
    ax1.set_ylabel("P99 TTFT (s)")
    _log_seconds(ax1, "y")
    ax2.set_xlabel("time-scale (load multiplier)")
    ax2.set_ylabel("SLO attainment")
    ax2.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_goodput_vs_load(ev: Evaluation, path: Path) -> Path:
    """Goodput (requests/s within SLO) and P50 TTFT against time-scale, one line per policy."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    groups = _by_label(ev)
    style = line_styles(list(groups))
    for name, rows in groups.items():
        xs = [s["time_scale"] for s in rows]
        ax1.plot(xs, [s["goodput_rps"] for s in rows], label=name, **style[name])
        ax2.plot(xs, [s["ttft_ms"]["p50"] / 1e3 for s in rows], label=name, **style[name])
    ax1.set_ylabel("goodput (requests/s within SLO)")
    ax2.set_ylabel("P50 TTFT (s)")
    _log_seconds(ax2, "y")
    for ax in (ax1, ax2):
        ax.set_xlabel("time-scale (load multiplier)")
        ax.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    return _save(fig, path)


def lead_time_s(s: dict[str, Any]) -> float:
    """A run's mean lead time of used copies in seconds, NaN (not drawn) when no copy was
    used (the summary's null; summaries before 2026-12-05 wrote 0.0 for it)."""
    lead, rate = s.get("mean_lead_time_ms"), s.get("replication_hit_rate")
    return lead / 1e3 if lead is not None and rate else float("nan")


def wasted_share(s: dict[str, Any]) -> float:
    """The share of a run's replicated bytes that were wasted, NaN (not drawn) when it copied
    nothing: no copy wasted nothing, but it is no evidence of a policy that wastes little."""
    copied = s.get("bytes_replicated")
    return s["bytes_wasted"] / copied if copied else float("nan")


def _replicating(ev: Evaluation) -> dict[str, list[dict[str, Any]]]:
    return {k: v for k, v in _by_label(ev).items() if any(s["bytes_replicated"] for s in v)}


def plot_replication(ev: Evaluation, path: Path) -> Path | None:
    """Replication hit rate, mean lead time and wasted share of replicated bytes against
    load, for the policies that replicated anything (None if none did)."""
    groups = _replicating(ev)
    if not groups:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    style = line_styles(list(_by_label(ev)))  # each policy as in the other plots
    for name, rows in groups.items():
        xs = [s["time_scale"] for s in rows]
        waste = [wasted_share(s) for s in rows]
        look = style[name]
        rates = [s["replication_hit_rate"] for s in rows]
        axes[0].plot(xs, [math.nan if r is None else r for r in rates], label=name, **look)
        axes[1].plot(xs, [lead_time_s(s) for s in rows], label=name, **look)
        axes[2].plot(xs, waste, label=name, **look)
    axes[0].set_ylabel("replication hit rate (blocks used / placed)")
    axes[1].set_ylabel("mean lead time of used replicas (s)")
    axes[2].set_ylabel("wasted share of replicated bytes")
    axes[2].axhline(0.25, color="grey", linestyle="--", linewidth=1)
    for ax in axes:
        ax.set_xlabel("time-scale (load multiplier)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    return _save(fig, path)


FATE_COLOURS = {
    "used": "tab:green",
    "routed_to_source": "tab:orange",
    "routed_elsewhere": "tab:red",
    "expired": "tab:grey",
    "unsettled": "lightgrey",
}


def plot_copy_fates(ev: Evaluation, path: Path) -> Path | None:
    """Where each replicating policy's copies went (``copy_fates``: used on their node,
    their request routed back to the source or elsewhere, expired first), one bar per policy
    and load (its number of copies in brackets), as shares of its copies (None if no policy
    made a copy)."""
    bars = [(f"{label} x{s['time_scale']:g} ({sum(s['copy_fates'].values())})", s["copy_fates"])
            for label, rows in _by_label(ev).items() for s in rows
            if sum(s.get("copy_fates", {}).values())]  # fmt: skip
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(bars) + 1.5))
    left = np.zeros(len(bars))
    for fate, colour in FATE_COLOURS.items():
        share = np.array([f.get(fate, 0) / sum(f.values()) for _, f in bars])
        ax.barh(range(len(bars)), share, left=left, color=colour, label=fate.replace("_", " "))
        left += share
    ax.set_yticks(range(len(bars)), [name for name, _ in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of the copies (each followed to the first request reading it)")
    ax.legend(fontsize=8, ncol=len(FATE_COLOURS), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return _save(fig, path)


def plot_waste_vs_budget(ev: Evaluation, path: Path) -> Path | None:
    """Replicated and wasted bytes against the speculative quota, per policy and load (None
    unless the evaluation swept quotas)."""
    rows = [s for s in ev.summaries if "speculative_quota_gib" in s]
    if len({s["speculative_quota_gib"] for s in rows}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[dict[str, Any]]] = {}
    for s in rows:
        key = s["policy"] + (f" [{s['slo_label']}]" if "slo_label" in s else "")
        series.setdefault(f"{key} x{s['time_scale']:g}", []).append(s)
    for name, pts in series.items():
        pts.sort(key=lambda s: s["speculative_quota_gib"])
        qs = [s["speculative_quota_gib"] for s in pts]
        line = ax.plot(qs, [s["bytes_replicated"] / 1e9 for s in pts], marker="o", label=name)
        ax.plot(qs, [s["bytes_wasted"] / 1e9 for s in pts], marker="x", linestyle="--",
                color=line[0].get_color())  # fmt: skip
    ax.set_xlabel("speculative quota per node (GiB)")
    ax.set_ylabel("GB replicated (solid) / wasted (dashed)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


PLOTS: dict[str, Callable[[Evaluation, Path], Path | None]] = {
    "ttft_cdf.png": plot_ttft_cdf,
    "p99_vs_load.png": plot_p99_vs_load,
    "goodput_vs_load.png": plot_goodput_vs_load,
    "replication.png": plot_replication,
    "copy_fates.png": plot_copy_fates,
    "waste_vs_budget.png": plot_waste_vs_budget,
}


def write_plots(ev: Evaluation, out: Path) -> list[Path]:
    """Every plot that applies to ``ev``, into ``out``; returns the files written. A plot that
    does not apply is removed from ``out``: an earlier evaluation's would contradict this
    one's summary."""
    written = []
    for name, plot in PLOTS.items():
        path = plot(ev, out / name)
        if path is None:
            (out / name).unlink(missing_ok=True)
        else:
            written.append(path)
    return written
