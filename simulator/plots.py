"""Plots of an evaluation: TTFT CDFs and P99 TTFT / SLO attainment against load."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kvcast.simulator.evaluation import Evaluation


def plot_ttft_cdf(ev: Evaluation, path: Path, time_scale: float | None = None) -> Path:
    """One CDF per policy at ``time_scale`` (default: load 1 if evaluated, else the lowest)."""
    scales = sorted({x for _, x in ev.ttft})
    if time_scale is None:
        time_scale = 1.0 if 1.0 in scales else scales[0]
    x_sel = time_scale
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, x), ttft in ev.ttft.items():
        if x != x_sel or ttft.empty:
            continue
        v = np.sort(ttft.to_numpy() / 1e3)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log)")
    ax.set_ylabel("fraction of requests")
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
    by_policy: dict[str, list[dict[str, float]]] = {}
    for s in ev.summaries:
        by_policy.setdefault(s["policy"], []).append(s)
    for name, rows in by_policy.items():
        rows = sorted(rows, key=lambda s: s["time_scale"])
        xs = [s["time_scale"] for s in rows]
        ax1.plot(xs, [s["ttft_ms"]["p99"] / 1e3 for s in rows], marker="o", label=name)
        ax2.plot(xs, [s["slo_attainment"] for s in rows], marker="o", label=name)
    ax1.set_xlabel("time-scale (load multiplier)")
    ax1.set_ylabel("P99 TTFT (s)")
    ax1.set_yscale("log")
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
