"""Artefacts a training run leaves beside the model: plots and the model card (markdown)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kvcast.features.spec import FeatureSpec
from kvcast.predictor.metrics import pr_curve
from kvcast.training.evaluate import METRICS
from kvcast.training.reliability import Reliability, reliability_bins

Scores = dict[str, np.ndarray]  # curve name -> probabilities of the same rows


def pr_steps(y: np.ndarray, w: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The precision-recall curve as drawn (``where="pre"`` steps from recall 0): each
    threshold's precision holds over the recall it adds, so the area under the drawn curve
    is the average precision (``pr_auc``); a line between thresholds would show precision
    that no threshold gives."""
    r, prec = pr_curve(y, p, w)
    if len(r) == 0:
        return r, prec
    return np.r_[0.0, r], np.r_[prec[0], prec]


def plot_pr(y: np.ndarray, w: np.ndarray, scores: Scores, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, p in scores.items():
        r, prec = pr_steps(y, w, p)
        ax.step(r, prec, where="pre", label=name)
    ax.set(xlabel="recall", ylabel="precision", title="precision-recall (test window)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_reliability(
    y: np.ndarray, w: np.ndarray, p: np.ndarray, bins: int, path: Path, strategy: str = "quantile"
) -> Reliability:
    """The reliability diagram over ``bins`` bins of ``strategy`` (:mod:`.reliability`: equal
    mass by default, so the points sit where the rows are); returns the bins drawn. The axes
    end just past the largest point: probabilities below 0.2 are not squeezed into a corner."""
    rel = reliability_bins(y, p, w, bins, strategy)
    top = min(1.0, 1.1 * max(0.05, *rel.mean_p, *rel.rate)) if len(rel.rows) else 1.0
    kind = "equal-mass" if strategy == "quantile" else "equal-width"
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([0, top], [0, top], color="grey", linestyle="--", label="perfect")
    ax.plot(rel.mean_p, rel.rate, marker="o", label=f"model (ECE {rel.ece:.3g})")
    ax.set(
        xlabel="predicted probability (bin mean)",
        ylabel="observed burst rate",
        title=f"reliability (test window, {len(rel.rows)} {kind} bins)",
        xlim=(0, top),
        ylim=(0, top),
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return rel


def plot_importance(importance: dict[str, float], path: Path, top: int = 20) -> Path:
    items = sorted(importance.items(), key=lambda kv: kv[1], reverse=True)[:top][::-1]
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(items) + 1.2))
    ax.barh([k for k, _ in items], [v for _, v in items])
    ax.set(xlabel="importance", title="feature importance")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _row(name: str, m: dict[str, Any]) -> str:
    cells = [f"{m[k]:.4g}" if isinstance(m.get(k), float) else str(m.get(k)) for k in METRICS]
    return f"| {name} | " + " | ".join(cells) + " |"


def model_card(
    *,
    kind: str,
    version: str,
    spec: FeatureSpec,
    metrics: dict[str, dict[str, Any]],
    windows: dict[str, tuple[float, float]],
    provenance: dict[str, str],
    notes: dict[str, str],
) -> str:
    lines = [f"# kvcast model card: {kind}", "", f"- kvcast version: {version}"]
    lines += [f"- {k}: {v}" for k, v in {**provenance, **notes}.items()]
    lines += ["", "## Time windows (tick ms, [start, end))", ""]
    lines += [f"- {part}: {lo:.0f} - {hi:.0f}" for part, (lo, hi) in windows.items()]
    lines += [
        "",
        "## Metrics",
        "",
        "| model | " + " | ".join(METRICS) + " |",
        "|---" * (len(METRICS) + 1) + "|",
    ]
    lines += [_row(name, m) for name, m in metrics.items()]
    lines += [
        "",
        f"## Features (spec {spec.digest}, version {spec.version})",
        "",
        "| # | name | unit | family |",
        "|---|---|---|---|",
    ]
    lines += [f"| {i} | {f.name} | {f.unit} | {f.family} |" for i, f in enumerate(spec.features)]
    return "\n".join(lines) + "\n"
