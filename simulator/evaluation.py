"""Several policies x several loads on one trace: the table every comparison is made from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kvcast.features.traces.table import Trace
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.capacity import CapacityResult, find_capacity
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import simulate
from kvcast.simulator.replication_policies import make_policy

Step = Callable[[str], None]
"""Called with a short label each time one simulation finishes."""


@dataclass
class Evaluation:
    summaries: list[dict[str, Any]] = field(default_factory=list)
    """One summary per (policy, time_scale), in the order asked."""
    ttft: dict[tuple[str, float], pd.Series] = field(default_factory=dict)
    """TTFT of served requests per (policy, time_scale), for the CDF plot."""
    capacity: dict[str, CapacityResult] = field(default_factory=dict)


def evaluate(
    trace: Trace,
    cfg: SimConfig,
    policies: Sequence[str],
    time_scales: Sequence[float] = (1.0,),
    *,
    capacity: bool = False,
    on_step: Step | None = None,
    decider: DeciderConfig | None = None,
) -> Evaluation:
    """Run every policy at every time-scale (and its capacity search when asked).

    Replicating policies (``oracle``, ``predictive_*``) use ``decider`` (default: the
    embedded decider config); each simulation gets a fresh policy."""
    for name in policies:  # fail fast on a bad name, before any work
        make_policy(name, cfg, decider)
    out = Evaluation()
    for name in policies:
        if capacity:

            def attainment(x: float, name: str = name) -> float:
                res = simulate(trace, cfg, make_policy(name, cfg, decider), time_scale=x)
                if on_step is not None:
                    on_step(f"{name} capacity probe x{x:.3g}")
                return float(res.summary["slo_attainment"])

            out.capacity[name] = find_capacity(attainment, target=cfg.slo.target_attainment)
        for x in time_scales:
            res = simulate(trace, cfg, make_policy(name, cfg, decider), time_scale=x)
            s = res.summary
            if capacity:
                s["capacity_time_scale"] = out.capacity[name].time_scale
            out.summaries.append(s)
            served = res.requests.loc[~res.requests["rejected"], "ttft_ms"]
            out.ttft[(name, x)] = served.reset_index(drop=True)
            if on_step is not None:
                on_step(f"{name} x{x:g}")
    return out


def count_steps(policies: Sequence[str], time_scales: Sequence[float]) -> int:
    """Simulations an evaluation runs, not counting capacity probes (unknown in advance)."""
    return len(policies) * len(time_scales)
