"""How predictable is a trace's prefix reuse: the hazard of a request's next use.

Predictive replication pays only where a model can say *when* a prefix comes back: a copy
made too early is evicted or expires, one made for a chain that never returns is waste. This
module measures, on a trace alone, the most any predictor that knows only how long a chain
has been idle could reach.

A request's *next use* is the first later request that continues its own prefix: the longest
prefix that request shares with everything seen before it is at least ``min_blocks`` blocks
deep (so that a system prompt every request shares does not count), and this request was
the last one to use that prefix's deepest block. The *hazard* at idle age ``x`` is, among the
requests whose chain has not been used again ``x`` ms after them, the share used within the
next ``window_ms``: the precision of "replicate every chain idle for ``x``". Only requests
whose window ends within the trace count (no censored windows).

Compare it with the precision the decider needs to act: ``P x saved > costs`` means, for
example, ``P > (w x L + reclaim) / (L + reclaim)`` for a promotion that saves ``L`` ms of
load per block at transfer weight ``w`` (about 0.38 for a DRAM block at 25 GB/s with the
default costs). Where the hazard stays far below that at every age, only features that tell
chains apart (session statistics, request shape) can make prediction pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class HazardRow:
    idle_ms: float
    waiting: int  # requests not yet followed at this idle age (window within the trace)
    followed: int  # of those, followed within the window
    p: float  # followed / waiting (NaN when none waits)


@dataclass(frozen=True)
class ReuseHazard:
    window_ms: float
    min_blocks: int
    requests: int
    ever_followed: float  # share of requests followed within the last age + window
    horizon_ms: float  # that last age + window
    gap_quantiles_ms: dict[str, float]  # of the gaps to the next use, over followed requests
    rows: tuple[HazardRow, ...]

    @property
    def best(self) -> HazardRow | None:
        """The idle age with the highest hazard (the best age-only rule)."""
        rows = [r for r in self.rows if r.waiting]
        return max(rows, key=lambda r: r.p) if rows else None

    def to_dict(self) -> dict[str, object]:
        return {
            "window_ms": self.window_ms,
            "min_blocks": self.min_blocks,
            "requests": self.requests,
            "ever_followed": self.ever_followed,
            "horizon_ms": self.horizon_ms,
            "gap_quantiles_ms": self.gap_quantiles_ms,
            "rows": [vars(r) for r in self.rows],
        }


def next_use_ms(requests: pd.DataFrame, min_blocks: int = 2) -> np.ndarray:
    """Per request (the table's order), the arrival of its next use (see the module doc),
    ``inf`` when none comes in the trace."""
    if min_blocks < 1:
        raise ValueError(f"min_blocks must be at least 1, got {min_blocks}")
    arrivals = requests["arrival_ms"].to_numpy(dtype=np.float64)
    out = np.full(len(arrivals), np.inf)
    last: dict[int, int] = {}  # block -> the request that used it last
    for i, hashes in enumerate(requests["block_hashes"].tolist()):
        depth = 0
        for b in hashes:
            if b not in last:
                break
            depth += 1
        if depth >= min_blocks:
            prev = last[hashes[depth - 1]]
            if out[prev] == np.inf:
                out[prev] = arrivals[i]
        for b in hashes:
            last[b] = i
    return out


def reuse_hazard(
    requests: pd.DataFrame,
    *,
    window_ms: float,
    idle_ms: Sequence[float],
    min_blocks: int = 2,
) -> ReuseHazard:
    """The hazard of the next use at each idle age (see the module doc)."""
    if not window_ms > 0:
        raise ValueError(f"window must be positive, got {window_ms} ms")
    ages = sorted(float(x) for x in idle_ms)
    if not ages or ages[0] < 0:
        raise ValueError(f"idle ages must be non-negative and at least one, got {list(idle_ms)}")
    if not requests["block_hashes"].map(len).any():
        raise ValueError("the trace has no block hashes: its prefix reuse cannot be measured")
    arrivals = requests["arrival_ms"].to_numpy(dtype=np.float64)
    gap = next_use_ms(requests, min_blocks) - arrivals
    end = float(arrivals.max()) if len(arrivals) else 0.0
    rows = []
    for x in ages:
        observed = arrivals + x + window_ms <= end
        waiting = observed & (gap > x)
        followed = waiting & (gap <= x + window_ms)
        n, k = int(waiting.sum()), int(followed.sum())
        rows.append(HazardRow(x, n, k, k / n if n else float("nan")))
    horizon = ages[-1] + window_ms
    seen = arrivals + horizon <= end
    ever = float((gap[seen] <= horizon).mean()) if seen.any() else float("nan")
    gaps = gap[np.isfinite(gap)]
    qs = (0.1, 0.25, 0.5, 0.75, 0.9)
    quantiles = dict(zip((f"p{round(q * 100)}" for q in qs), np.quantile(gaps, qs).tolist(),
                         strict=True)) if len(gaps) else {}  # fmt: skip
    return ReuseHazard(window_ms, min_blocks, len(arrivals), ever, horizon, quantiles, tuple(rows))


def draw_hazard(ax: Any, hazards: dict[str, ReuseHazard]) -> None:
    """The hazard against idle age on the matplotlib axes ``ax``, one line per named trace."""
    for name, h in hazards.items():
        xs = [r.idle_ms / 1e3 for r in h.rows]
        ax.plot(xs, [r.p for r in h.rows], marker="o", label=name)
    windows = {h.window_ms for h in hazards.values()}
    ax.set_xlabel("idle since the request (s)")
    ax.set_ylabel(f"P(next use within {', '.join(f'{w / 1e3:g}' for w in windows)} s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()


def plot_hazard(hazards: dict[str, ReuseHazard], path: str) -> str:
    """:func:`draw_hazard` as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    draw_hazard(ax, hazards)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
