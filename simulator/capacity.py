"""Capacity: the highest load (time-scale) at which a policy still meets its SLO target.

DistServe's goodput view: ``capacity_time_scale`` is the largest compression factor X of the
trace's arrivals at which at least ``target`` (default 90%) of requests meet their TTFT SLO.
Attainment falls as load rises, so the search brackets the crossing by doubling or halving
from 1.0 and then bisects to a relative tolerance.

The search is bounded (``lo_limit``, ``hi_limit``), and a load may also be one the trace
cannot be played at (``attainment`` returns None: e.g. a ``sessions`` load so low that no
session is drawn). Where the search stops at such an edge the result says so (``bound``):
``"upper"`` when the target was still met at the highest load probed (the capacity is *at
least* ``time_scale``), ``"lower"`` when it was met at no load probed (the capacity is below
``bound_time_scale``, the lowest load probed; ``time_scale`` is then 0.0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Bound = Literal["upper", "lower"]


@dataclass(frozen=True)
class CapacityResult:
    time_scale: float
    """The highest probed load that met the target (0.0 if none did)."""
    probes: tuple[tuple[float, float], ...] = field(default=())
    """Every (time_scale, attainment) evaluated, in order (NaN: the load could not be
    played)."""
    bound: Bound | None = None
    """Which edge of the search the result stopped at, if any (see the module doc)."""
    bound_time_scale: float | None = None
    """With ``bound``: the load that edge lies at (``time_scale`` for ``"upper"``, the lowest
    load probed for ``"lower"``)."""
    note: str | None = None
    """Why the search stopped at an edge before its limit (the refused load's reason)."""

    def shown(self) -> str:
        """The capacity as a table shows it: ``">=256"``, ``"<0.0156"`` or ``"2.25"``."""
        if self.bound == "upper":
            return f">={self.time_scale:.3g}"
        if self.bound == "lower":
            return f"<{self.bound_time_scale:.3g}"
        return f"{self.time_scale:.3g}"


def find_capacity(
    attainment: Callable[[float], float | None],
    *,
    target: float = 0.9,
    start: float = 1.0,
    rel_tol: float = 0.02,
    lo_limit: float = 1 / 64,
    hi_limit: float = 256.0,
    refused: Callable[[float], str | None] | None = None,
) -> CapacityResult:
    """Bisection on a (noisy, roughly decreasing) attainment curve; every probe lies within
    ``[lo_limit, hi_limit]``. ``attainment`` returns None for a load that cannot be played;
    ``refused(x)``, if given, tells why (for ``note``)."""
    if not 0 < target <= 1:
        raise ValueError(f"capacity target attainment must be in (0, 1], got {target!r}")
    if not 0 < lo_limit <= start <= hi_limit or not math.isfinite(hi_limit):
        raise ValueError(
            f"capacity search needs 0 < lo_limit <= start <= hi_limit < inf, got "
            f"{lo_limit!r}, {start!r}, {hi_limit!r}"
        )
    probes: list[tuple[float, float]] = []
    stop: list[str | None] = []  # the reason of the first unplayable load

    def ok(x: float) -> bool | None:
        a = attainment(x)
        if a is None or a != a:  # unplayable (NaN: no request to judge)
            probes.append((x, math.nan))
            if not stop:
                stop.append(refused(x) if refused is not None else None)
            return None
        probes.append((x, a))
        return a >= target

    def result(x: float, bound: Bound | None = None, at: float | None = None) -> CapacityResult:
        note = stop[0] if stop and bound is not None else None
        return CapacityResult(x, tuple(probes), bound, at, note)

    x = start
    first = ok(x)
    if first is None:
        raise ValueError(
            f"capacity search: the starting load x{x:g} cannot be played"
            + (f" ({stop[0]})" if stop and stop[0] else "")
        )
    if first:
        lo, hi = x, None
        while hi is None:
            if lo >= hi_limit:
                return result(lo, "upper", lo)
            nxt = min(lo * 2, hi_limit)  # never past the limits the search was given
            got = ok(nxt)
            if got is None:  # cannot be played higher: at least lo
                return result(lo, "upper", lo)
            if got:
                lo = nxt
            else:
                hi = nxt
    else:
        hi, lo = x, None
        while lo is None:
            if hi <= lo_limit:
                return result(0.0, "lower", hi)
            nxt = max(hi / 2, lo_limit)
            got = ok(nxt)
            if got is None:  # cannot be played lower: below hi, the lowest load that could
                return result(0.0, "lower", hi)
            if got:
                lo = nxt
            else:
                hi = nxt
    while (hi - lo) / lo > rel_tol:
        mid = (lo + hi) / 2
        if ok(mid):  # an unplayable mid (None) counts as a miss: the capacity stays lo
            lo = mid
        else:
            hi = mid
    return result(lo)
