"""The predictive-replication goal, judged from an evaluation's summaries (``kvcast verdict``).

Each replicating policy evaluated (the oracle and the ``predictive_*`` policies, under each
SLO and speculative quota) is measured against the *bar*: of the goal's routers, the one with
the highest capacity on the same trace and SLO. Each check is met, missed, or not measured
(the evaluation lacks the run it needs, and the note says which): never guessed. The goal's
numbers are a :class:`~kvcast.simulator.goal_config.GoalConfig`.

A capacity that is a bound (the search stopped at an edge of its loads) decides a check only
when the bound does: at least x2 against a bar of x1.5 is a gain of at least +33%.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvcast.simulator.evaluation import TaskKey, task_key, task_label
from kvcast.simulator.goal_config import GoalConfig
from kvcast.simulator.replication_policies import replicating_policy_names

CHECKS = (
    "capacity_gain", "oracle_share", "p50_at_capacity", "p99_at_capacity", "waste",
    "active_evictions", "quota_overruns", "low_load_p50", "low_load_p99",
)  # fmt: skip
"""Every check's name, in the order they are reported."""

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Check:
    name: str
    goal: str  # the rule as people read it: "capacity >= bar +15%"
    value: str  # what was measured ("-" when not measured)
    met: bool | None  # None: not measured
    note: str = ""  # why not measured, or what decided it
    measured: float | None = None  # the figure compared (a share: 0.15 is +15%), when one is
    limit: float | None = None  # ... and its limit: met at or below it,
    at_least: bool = False  # ... or, with ``at_least``, at or above it


@dataclass(frozen=True)
class PolicyVerdict:
    label: str  # the policy, with its SLO / quota when several were evaluated
    policy: str
    router: str | None  # the router it runs on (summary key ``base_router``)
    checks: tuple[Check, ...]

    @property
    def met(self) -> bool | None:
        """False when a check is missed; None when none is missed but one is not measured."""
        if any(c.met is False for c in self.checks):
            return False
        return None if any(c.met is None for c in self.checks) else True


@dataclass(frozen=True)
class GroupVerdict:
    """The verdicts under one SLO."""

    slo: str | None
    bar: str | None  # None: no router of the goal has a capacity in the summaries
    bar_capacity: float | None  # its capacity_time_scale (a bound's edge for "lower")
    bar_capacity_bound: str | None  # "upper": at least that; "lower": below it; None: measured
    oracle_gains: dict[str, float]  # oracle label -> its capacity gain over the bar
    policies: tuple[PolicyVerdict, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for p, v in zip(out["policies"], self.policies, strict=True):
            p["met"] = v.met
        return out


def _at(rows: Sequence[Row], x: float) -> Row | None:
    return next((r for r in rows if math.isclose(r["time_scale"], x, rel_tol=1e-9)), None)


@dataclass(frozen=True)
class _Capacity:
    value: float
    bound: str | None  # "upper": at least value; "lower": below value; None: bracketed

    def __str__(self) -> str:
        return {"upper": ">=", "lower": "<"}.get(self.bound or "", "") + f"{self.value:.3g}"


def _capacity(rows: Sequence[Row]) -> _Capacity | None:
    """The task's capacity as its rows give it (a "lower" bound's edge in
    ``capacity_bound_time_scale``); None where none is a positive number."""
    for r in rows:
        bound = r.get("capacity_bound")
        x = r.get("capacity_bound_time_scale" if bound == "lower" else "capacity_time_scale")
        if isinstance(x, int | float) and math.isfinite(x) and x > 0:
            return _Capacity(float(x), bound if bound in ("upper", "lower") else None)
    return None


def _interval(cap: _Capacity) -> tuple[float, float]:
    if cap.bound == "upper":
        return cap.value, math.inf
    if cap.bound == "lower":
        return 0.0, cap.value
    return cap.value, cap.value


def _gain_range(cap: _Capacity, bar: _Capacity) -> tuple[float, float]:
    """The capacity gain over the bar as an interval: a bound on either side opens it."""
    c_lo, c_hi = _interval(cap)
    b_lo, b_hi = _interval(bar)
    lo = c_lo / b_hi - 1.0 if b_hi < math.inf else -1.0
    hi = c_hi / b_lo - 1.0 if b_lo > 0 and c_hi < math.inf else math.inf
    return lo, hi


EPS = 1e-9
"""Slack for float ratios at a goal's edge: x2.3 against x2.0 is +15%, not +14.99999%."""


def _at_least(lo: float, hi: float, threshold: float) -> bool | None:
    if lo >= threshold - EPS:
        return True
    if hi < threshold - EPS:
        return False
    return None


def _pct(x: float, sign: str = "+") -> str:
    """``+15%``, ``-30%``, ``+1.8%``: a percentage as the goal and the figures read."""
    return format(x, f"{sign}.1%").replace(".0%", "%")


def judge(
    summaries: Sequence[Row], goal: GoalConfig, unplayable: Mapping[float, str] | None = None
) -> list[GroupVerdict]:
    """One :class:`GroupVerdict` per SLO in ``summaries`` (``kvcast evaluate``'s list);
    ``unplayable``: loads the verdict reads that the trace cannot be played at, with why."""
    replicating = set(replicating_policy_names())
    by_key: dict[TaskKey, list[Row]] = {}
    for row in summaries:
        by_key.setdefault(task_key(row), []).append(row)
    slos = list(dict.fromkeys(k[1] for k in by_key))
    return [_Slo(slo, by_key, goal, dict(unplayable or {})).judge(replicating) for slo in slos]


class _Slo:
    """The rows of one SLO, its bar, and the checks of each replicating policy under it."""

    def __init__(
        self, slo: Any, by_key: Mapping[TaskKey, list[Row]], goal: GoalConfig,
        unplayable: dict[float, str],
    ) -> None:  # fmt: skip
        self.slo, self.goal, self.unplayable = slo, goal, unplayable
        self.rows = {(k[0], k[2]): r for k, r in by_key.items() if k[1] == slo}
        routers = {p: r for (p, q), r in self.rows.items() if q is None and p in goal.routers}
        caps = {name: c for name, rows in routers.items() if (c := _capacity(rows))}
        # the highest capacity; of equal ones, "at least" before measured before "below"
        rank = {"upper": 2, None: 1, "lower": 0}
        self.bar = max(caps, key=lambda n: (caps[n].value, rank[caps[n].bound]), default=None)
        self.bar_cap = caps[self.bar] if self.bar is not None else None

    def judge(self, replicating: set[str]) -> GroupVerdict:
        notes: list[str] = []
        if self.bar is None:
            notes.append("no router of the goal (" + ", ".join(self.goal.routers) + ") has a "
                         "capacity here: add one to --policies, with --capacity")  # fmt: skip
        elif self.bar_cap is not None and self.bar_cap.bound is not None:
            notes.append(f"the bar's capacity is a bound ({self.bar}: {self.bar_cap}): "
                         "widen the loads searched")  # fmt: skip
        oracles = {}
        for (policy, quota), _ in self.rows.items():
            if policy == "oracle" and (gain := self.oracle_gain(quota)) is not None:
                oracles[task_label("oracle", self.slo, quota)] = gain
        verdicts = []
        for (p, q), rows in self.rows.items():
            if p in replicating:
                label, router = task_label(p, self.slo, q), rows[0].get("base_router")
                verdicts.append(PolicyVerdict(label, p, router, self.checks(p, q, rows)))
        cap = self.bar_cap
        return GroupVerdict(
            self.slo, self.bar, cap.value if cap else None, cap.bound if cap else None, oracles,
            tuple(verdicts), tuple(notes),
        )  # fmt: skip

    def oracle_gain(self, quota: Any) -> float | None:
        """The oracle's capacity gain over the bar at ``quota`` (else without a quota), when
        both capacities are measured."""
        rows = self.rows.get(("oracle", quota)) or self.rows.get(("oracle", None))
        cap = _capacity(rows) if rows else None
        if cap is None or self.bar_cap is None:
            return None
        lo, hi = _gain_range(cap, self.bar_cap)
        return lo if lo == hi else None

    def checks(self, policy: str, quota: Any, rows: Sequence[Row]) -> tuple[Check, ...]:
        goal = self.goal
        out = _capacity_checks(policy, rows, self.bar_cap, self.oracle_gain(quota), goal)
        out += _at_capacity(rows, self.bar_rows(), self.bar_cap, goal, self.missing)
        out += _costs(rows, goal)
        router = rows[0].get("base_router")
        theirs = self.rows.get((router, None)) if router else None
        out += _low_load(rows, router, theirs, goal, self.missing)
        return tuple(out)

    def bar_rows(self) -> Sequence[Row]:
        return self.rows[(self.bar, None)] if self.bar is not None else ()

    def missing(self, who: str, x: float) -> str:
        """Why ``who`` has no run at ``x``, and what would give one."""
        for load, why in self.unplayable.items():
            if math.isclose(load, x, rel_tol=1e-9):
                return f"no run of {who} at x{x:g}: the trace cannot be played there ({why})"
        return f"no run of {who} at x{x:g}: kvcast evaluate --verdict runs it"


def _ratio(mine: Row, theirs: Row, key: str) -> float | None:
    """``mine``'s TTFT ``key`` over ``theirs`` minus 1; None where either is not a positive
    finite number (a run that served nothing has none)."""
    a, b = (mine.get("ttft_ms") or {}).get(key), (theirs.get("ttft_ms") or {}).get(key)
    ok = all(isinstance(v, int | float) and math.isfinite(v) for v in (a, b))
    return a / b - 1.0 if ok and b > 0 and a >= 0 else None


def _capacity_checks(
    policy: str,
    rows: Sequence[Row],
    bar: _Capacity | None,
    oracle_gain: float | None,
    goal: GoalConfig,
) -> list[Check]:
    want = f">= bar {_pct(goal.capacity_gain)}"
    share = f">= {_pct(goal.oracle_share, '')} of the oracle's gain"
    cap = _capacity(rows)
    if bar is None or cap is None:
        why = "no capacity for the bar" if bar is None else "no capacity: evaluate --capacity"
        out = [Check("capacity_gain", want, "-", None, why)]
        return out + ([] if policy == "oracle" else [Check("oracle_share", share, "-", None, why)])
    lo, hi = _gain_range(cap, bar)
    shown = _pct(lo) if lo == hi else f"x{cap} vs x{bar}"
    why = "" if lo == hi else "a capacity is a bound"
    exact = lo if lo == hi else None
    out = [Check("capacity_gain", want, shown, _at_least(lo, hi, goal.capacity_gain), why,
                 exact, goal.capacity_gain, at_least=True)]  # fmt: skip
    if policy == "oracle":
        return out
    if oracle_gain is None:
        why = "no oracle capacity measured to compare with (none, or a bound)"
        out.append(Check("oracle_share", share, "-", None, why))
    elif oracle_gain <= 0:  # no gain to keep a share of: the goal's rule does not apply
        out.append(Check("oracle_share", share, f"{shown} vs {_pct(oracle_gain)}", None,
                         "the oracle gains nothing over the bar: no share to keep"))  # fmt: skip
    else:
        need = goal.oracle_share * oracle_gain
        value = f"{shown} vs {_pct(oracle_gain)}"
        out.append(Check("oracle_share", share, value, _at_least(lo, hi, need), why, exact,
                         need, at_least=True))  # fmt: skip
    return out


def _pair(
    names: tuple[str, str], goals: tuple[str, str], mine: Row, theirs: Row,
    limits: tuple[float, float], x: float,
) -> list[Check]:  # fmt: skip
    """P50 and P99 TTFT of ``mine`` against ``theirs``: each met at or below its limit."""
    out = []
    for name, goal, key, limit in zip(names, goals, ("p50", "p99"), limits, strict=True):
        d = _ratio(mine, theirs, key)
        if d is None:
            out.append(Check(name, goal, "-", None, f"no TTFT {key} at x{x:g} (nothing served)"))
        else:
            out.append(Check(name, goal, _pct(d), d <= limit + EPS, "", d, limit))
    return out


def _at_capacity(
    rows: Sequence[Row],
    bar_rows: Sequence[Row],
    bar: _Capacity | None,
    goal: GoalConfig,
    missing: Callable[[str, float], str],
) -> list[Check]:
    names = ("p50_at_capacity", "p99_at_capacity")
    goals = (
        f"<= bar {_pct(-goal.p50_cut)} at the bar's capacity",
        f"<= bar {_pct(goal.p99_slack)} there",
    )
    if bar is None or bar.bound is not None:
        why = "the bar's capacity load is not known"
        return [Check(n, g, "-", None, why) for n, g in zip(names, goals, strict=True)]
    x = bar.value
    mine, theirs = _at(rows, x), _at(bar_rows, x)
    if mine is None or theirs is None:
        why = missing("it" if mine is None else "the bar", x)
        return [Check(n, g, "-", None, why) for n, g in zip(names, goals, strict=True)]
    return _pair(names, goals, mine, theirs, (-goal.p50_cut, goal.p99_slack), x)


def _costs(rows: Sequence[Row], goal: GoalConfig) -> list[Check]:
    replicated = sum(int(r["bytes_replicated"]) for r in rows)
    used = sum(int(r["bytes_replicated_used"]) for r in rows)
    waste_goal = f"<= {_pct(goal.max_waste, '')} of the bytes copied never used"
    if replicated:
        waste = 1.0 - used / replicated
        shown = f"{waste:.0%} of {replicated / 1e9:,.1f} GB"
        ok = waste <= goal.max_waste + EPS
        out = [Check("waste", waste_goal, shown, ok, "", waste, goal.max_waste)]
    else:
        out = [Check("waste", waste_goal, "nothing replicated", True, "", 0.0, goal.max_waste)]
    evictions = sum(int(r["active_evictions_by_speculative"]) for r in rows)
    over = max(int(r["peak_speculative_bytes_over_quota"]) for r in rows)
    out.append(Check("active_evictions", "0 (by speculative replicas)", str(evictions),
                     evictions == 0, "", evictions, 0))  # fmt: skip
    out.append(Check("quota_overruns", "0 bytes over quota", str(over), over == 0, "", over, 0))
    return out


def _low_load(
    rows: Sequence[Row],
    router: str | None,
    router_rows: Sequence[Row] | None,
    goal: GoalConfig,
    missing: Callable[[str, float], str],
) -> list[Check]:
    x = goal.low_load
    names = ("low_load_p50", "low_load_p99")
    goals = (f"<= its router {_pct(goal.low_load_slack)} at x{x:g}",) * 2
    mine = _at(rows, x)
    theirs = _at(router_rows, x) if router_rows else None
    if router is None:
        why = "the summaries do not name its router (base_router): re-run them"
    elif not router_rows:
        why = f"its router {router} was not evaluated alone: add it to --policies"
    elif mine is None or theirs is None:
        why = missing("it" if mine is None else router, x)
    else:
        return _pair(names, goals, mine, theirs, (goal.low_load_slack,) * 2, x)
    return [Check(n, g, "-", None, why) for n, g in zip(names, goals, strict=True)]


def loads_needed(summaries: Sequence[Row], goal: GoalConfig) -> list[float]:
    """The loads the verdict reads that some evaluated task lacks: each SLO's bar capacity
    (when measured, not a bound) and the goal's low load; what ``evaluate --verdict`` runs
    after the capacity search."""
    tasks: dict[TaskKey, list[float]] = {}
    for r in summaries:
        tasks.setdefault(task_key(r), []).append(float(r["time_scale"]))
    want = [goal.low_load]
    for group in judge(summaries, goal):
        if group.bar_capacity is not None and group.bar_capacity_bound is None:
            want.append(group.bar_capacity)
    out: list[float] = []
    for x in want:
        lacking = any(not any(math.isclose(x, h, rel_tol=1e-9) for h in have)
                      for have in tasks.values())  # fmt: skip
        if lacking and not any(math.isclose(x, o, rel_tol=1e-9) for o in out):
            out.append(x)
    return sorted(out)
