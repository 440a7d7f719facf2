"""Capacity: the highest load (time-scale) at which a policy still meets its SLO target.

DistServe's goodput view: ``capacity_time_scale`` is the largest compression factor X of the
trace's arrivals at which at least ``target`` (default 90%) of requests meet their TTFT SLO.
Attainment falls as load rises, so the search brackets the crossing by doubling or halving
from 1.0 and then bisects to a relative tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CapacityResult:
    time_scale: float
    """The highest probed load that met the target (0.0 if none did)."""
    probes: tuple[tuple[float, float], ...] = field(default=())
    """Every (time_scale, attainment) evaluated, in order."""


def find_capacity(
    attainment: Callable[[float], float],
    *,
    target: float = 0.9,
    start: float = 1.0,
    rel_tol: float = 0.02,
    lo_limit: float = 1 / 64,
    hi_limit: float = 256.0,
) -> CapacityResult:
    """Bisection on a (noisy, roughly decreasing) attainment curve; every probe lies within
    ``[lo_limit, hi_limit]`` (a result at ``hi_limit`` means "at least that")."""
    probes: list[tuple[float, float]] = []

    def ok(x: float) -> bool:
        a = attainment(x)
        probes.append((x, a))
        return a >= target

    x = start
    if ok(x):
        lo, hi = x, None
        while hi is None and lo < hi_limit:
            nxt = min(lo * 2, hi_limit)  # never past the limits the search was given
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
        if hi is None:
            return CapacityResult(lo, tuple(probes))
    else:
        hi, lo = x, None
        while lo is None and hi > lo_limit:
            nxt = max(hi / 2, lo_limit)
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
        if lo is None:
            return CapacityResult(0.0, tuple(probes))
    while (hi - lo) / lo > rel_tol:
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return CapacityResult(lo, tuple(probes))
