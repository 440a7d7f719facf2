"""The figure of a shadow evaluation (:mod:`kvcast.predictor.shadow_eval`): what an operator
looks at before switching a policy from shadow to active.

Three panels, from the per-decision outcomes:

1. lead time against transfer time, one point per hit: the go-live rule holds when at least
   ``min_covered`` of the points lie on or above the diagonal (the copy lands before its use);
2. the distributions behind it: the CDF of the hits' lead times beside the CDF of their
   transfer times;
3. calibration: the decisions grouped by the P(hit) the decider acted on, against the share
   that were hit (decisions whose TTL ran past the trace's end are left out: the trace cannot
   tell). Points below the diagonal are over-confident decisions, i.e. wasted bytes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

CALIBRATION_BINS = 10  # at most: quantile bins of P(hit); fewer when many Ps are equal


def calibration(outcomes: pd.DataFrame, bins: int = CALIBRATION_BINS) -> pd.DataFrame:
    """Per bin of P(hit) (quantile edges over the judged, uncensored decisions): the mean P,
    the share hit and the decision count."""
    judged = outcomes[~outcomes["censored"].to_numpy(bool)]
    p = judged["p_hit"].to_numpy(float)
    ok = np.isfinite(p)
    p, hit = p[ok], judged["hit"].to_numpy(bool)[ok]
    if not len(p):
        return pd.DataFrame({"p_mean": [], "hit_rate": [], "decisions": []})
    edges = np.unique(np.quantile(p, np.linspace(0.0, 1.0, bins + 1)))
    where = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, max(len(edges) - 2, 0))
    rows = [
        (float(p[sel].mean()), float(hit[sel].mean()), int(sel.sum()))
        for b in range(max(len(edges) - 1, 1))
        if (sel := where == b).any()
    ]
    return pd.DataFrame(rows, columns=["p_mean", "hit_rate", "decisions"])


def plot_shadow(
    outcomes: pd.DataFrame, path: Path, min_covered: float, title: str = "", min_hits: int = 1
) -> Path:
    """Write the three panels of the module doc to ``path`` (PNG); the verdict in the first
    one's title is the go-live rule's (``min_covered`` of the hits covered, at least
    ``min_hits`` hits)."""
    fig, (ax_lead, ax_cdf, ax_cal) = plt.subplots(1, 3, figsize=(15, 4.4))
    hits = outcomes[outcomes["hit"].to_numpy(bool)]
    lead = hits["lead_ms"].to_numpy(float)
    transfer = hits["transfer_ms"].to_numpy(float)
    if len(hits):
        covered = float((lead >= transfer).mean())
        ax_lead.scatter(transfer, lead, s=8, alpha=0.5, color="tab:blue")
        lo = max(min(lead.min(), transfer.min()), 1e-3)
        hi = max(lead.max(), transfer.max(), lo * 10)
        ax_lead.plot([lo, hi], [lo, hi], color="black", lw=1, label="lead = transfer")
        ax_lead.set_xscale("log")
        ax_lead.set_yscale("log")
        verdict = "pass" if covered >= min_covered and len(hits) >= min_hits else "fail"
        few = f", {min_hits:,} hits" if len(hits) < min_hits else ""
        ax_lead.set_title(
            f"{covered:.0%} of {len(hits):,} hits covered (needs {min_covered:.0%}{few}): "
            f"{verdict}",
            fontsize=10,
        )
        ax_lead.legend(fontsize=8, loc="lower right")
        for xs, name in ((lead, "lead time"), (transfer, "transfer time")):
            xs = np.sort(xs)
            share = np.arange(len(xs) + 1) / len(xs)
            ax_cdf.step(np.r_[xs[0], xs], share, where="post", label=name)
        ax_cdf.set_xscale("log")
        ax_cdf.legend(fontsize=8)
    else:
        for ax in (ax_lead, ax_cdf):
            ax.text(0.5, 0.5, "no hits", ha="center", va="center", transform=ax.transAxes)
    ax_lead.set_xlabel("transfer time (ms)")
    ax_lead.set_ylabel("lead time: decision to first use (ms)")
    ax_cdf.set_xlabel("ms (hits)")
    ax_cdf.set_ylabel("share of hits")
    ax_cdf.set_title("lead and transfer times", fontsize=10)
    cal = calibration(outcomes)
    if len(cal):
        size = 20 + 180 * cal["decisions"] / cal["decisions"].max()
        ax_cal.scatter(cal["p_mean"], cal["hit_rate"], s=size, color="tab:orange", zorder=3)
        ax_cal.plot(cal["p_mean"], cal["hit_rate"], color="tab:orange", lw=1)
    else:
        ax_cal.text(0.5, 0.5, "no decision judged", ha="center", va="center",
                    transform=ax_cal.transAxes)  # fmt: skip
    top = 1.0
    if len(cal):  # zoom on where the decisions are (low P is common), the diagonal kept
        top = min(1.0, max(0.05, 1.15 * float(max(cal["p_mean"].max(), cal["hit_rate"].max()))))
    ax_cal.plot([0, top], [0, top], color="black", lw=1, ls="--", label="calibrated")
    ax_cal.set_xlim(0, top * 1.04)  # a margin: points at P or share 1 stay whole
    ax_cal.set_ylim(0, top * 1.04)
    ax_cal.legend(fontsize=8, loc="best")  # clear of the points (a corner may hold them)
    ax_cal.set_xlabel("P(hit) the decider acted on (bin mean)")
    ax_cal.set_ylabel("share of decisions hit")
    ax_cal.set_title("calibration of the decisions (size: count)", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
