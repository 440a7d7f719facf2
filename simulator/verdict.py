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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvcast.simulator.goal_config import GoalConfig
from kvcast.simulator.replication_policies import replicating_policy_names

CHECKS = (
    "capacity_gain", "oracle_share", "p50_at_capacity", "p99_at_capacity", "waste",
    "active_evictions", "quota_overruns", "low_load_p50", "low_load_p99",
)  # fmt: skip
"""Every check's name, in the order they are reported."""

Row = Mapping[str, Any]
Key = tuple[str, Any, Any]  # (policy, slo_label, speculative_quota_gib)


@dataclass(frozen=True)
class Check:
    name: str
    goal: str  # the rule as people read it: "capacity >= bar +15%"
    value: str  # what was measured ("-" when not measured)
    met: bool | None  # None: not measured
    note: str = ""  # why not measured, or what decided it


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
    bar_capacity: float | None
    oracle_gain: float | None  # the oracle's capacity gain over the bar, when measured
    policies: tuple[PolicyVerdict, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for p, v in zip(out["policies"], self.policies, strict=True):
            p["met"] = v.met
        return out


def _key(row: Row) -> Key:
    return row["policy"], row.get("slo_label"), row.get("speculative_quota_gib")


def _label(key: Key) -> str:
    policy, slo, quota = key
    return (
        policy
        + (f" [{slo}]" if slo is not None else "")
        + (f" [{quota:g} GiB]" if quota is not None else "")
    )


def _at(rows: Sequence[Row], x: float) -> Row | None:
    return next((r for r in rows if math.isclose(r["time_scale"], x, rel_tol=1e-9)), None)


@dataclass(frozen=True)
class _Capacity:
    value: float
    bound: str | None  # "upper": at least value; "lower": below value; None: bracketed

    def __str__(self) -> str:
        return {"upper": ">=", "lower": "<"}.get(self.bound or "", "") + f"{self.value:.3g}"


def _capacity(rows: Sequence[Row]) -> _Capacity | None:
    for r in rows:
        x = r.get("capacity_time_scale")
        if x is not None and x == x:
            bound = r.get("capacity_bound")
            edge = r.get("capacity_bound_time_scale")
            return _Capacity(edge if bound == "lower" and edge is not None else x, bound)
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


def judge(summaries: Sequence[Row], goal: GoalConfig) -> list[GroupVerdict]:
    """One :class:`GroupVerdict` per SLO in ``summaries`` (``kvcast evaluate``'s list)."""
    replicating = set(replicating_policy_names())
    by_key: dict[Key, list[Row]] = {}
    for row in summaries:
        by_key.setdefault(_key(row), []).append(row)
    slos = list(dict.fromkeys(k[1] for k in by_key))
    return [_judge_slo(slo, by_key, replicating, goal) for slo in slos]


def _judge_slo(
    slo: Any, by_key: Mapping[Key, list[Row]], replicating: set[str], goal: GoalConfig
) -> GroupVerdict:
    routers = {k[0]: rows for k, rows in by_key.items() if k[1] == slo and k[0] in goal.routers}
    capacities = {name: c for name, rows in routers.items() if (c := _capacity(rows))}
    notes: list[str] = []
    bar = max(capacities, key=lambda n: capacities[n].value) if capacities else None
    if bar is None:
        notes.append(
            "no router of the goal (" + ", ".join(goal.routers) + ") has a capacity in these "
            "summaries: evaluate them with --capacity"
        )
    elif capacities[bar].bound is not None:
        notes.append(f"the bar's capacity is a bound ({bar}: {capacities[bar]}): widen the load")
    oracle_gain = None
    oracle_rows = by_key.get(("oracle", slo, None))
    if bar is not None and oracle_rows and (c := _capacity(oracle_rows)):
        lo, hi = _gain_range(c, capacities[bar])
        oracle_gain = lo if lo == hi else None
    verdicts = []
    for key, rows in by_key.items():
        if key[1] != slo or key[0] not in replicating:
            continue
        checks = _checks(key, rows, routers, bar, capacities, oracle_gain, goal)
        verdicts.append(PolicyVerdict(_label(key), key[0], rows[0].get("base_router"), checks))
    return GroupVerdict(
        slo, bar, capacities[bar].value if bar else None, oracle_gain, tuple(verdicts),
        tuple(notes),
    )  # fmt: skip


def _checks(
    key: Key,
    rows: Sequence[Row],
    routers: Mapping[str, Sequence[Row]],
    bar: str | None,
    capacities: Mapping[str, _Capacity],
    oracle_gain: float | None,
    goal: GoalConfig,
) -> tuple[Check, ...]:
    out = list(_capacity_checks(key[0], rows, bar, capacities, oracle_gain, goal))
    out += _at_capacity(rows, routers, bar, capacities, goal)
    out += _costs(rows, goal)
    out += _low_load(rows, routers, goal)
    return tuple(out)


def _capacity_checks(
    policy: str,
    rows: Sequence[Row],
    bar: str | None,
    capacities: Mapping[str, _Capacity],
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
    lo, hi = _gain_range(cap, capacities[bar])
    shown = _pct(lo) if lo == hi else f"x{cap} vs x{capacities[bar]}"
    why = "" if lo == hi else "a capacity is a bound"
    out = [Check("capacity_gain", want, shown, _at_least(lo, hi, goal.capacity_gain), why)]
    if policy == "oracle":
        return out
    if oracle_gain is None:
        out.append(Check("oracle_share", share, "-", None, "no oracle capacity to compare with"))
        return out
    need = goal.oracle_share * oracle_gain
    value = f"{shown} vs {_pct(oracle_gain)}"
    out.append(Check("oracle_share", share, value, _at_least(lo, hi, need), why))
    return out


def _at_capacity(
    rows: Sequence[Row],
    routers: Mapping[str, Sequence[Row]],
    bar: str | None,
    capacities: Mapping[str, _Capacity],
    goal: GoalConfig,
) -> list[Check]:
    p50_goal = f"<= bar {_pct(-goal.p50_cut)} at the bar's capacity"
    p99_goal = f"<= bar {_pct(goal.p99_slack)} there"
    if bar is None or capacities[bar].bound is not None:
        why = "the bar's capacity load is not known"
        return [Check("p50_at_capacity", p50_goal, "-", None, why),
                Check("p99_at_capacity", p99_goal, "-", None, why)]  # fmt: skip
    x = capacities[bar].value
    mine, theirs = _at(rows, x), _at(routers[bar], x)
    if mine is None or theirs is None:
        why = f"no run at x{x:g} (the bar's capacity): kvcast evaluate --verdict adds it"
        return [Check("p50_at_capacity", p50_goal, "-", None, why),
                Check("p99_at_capacity", p99_goal, "-", None, why)]  # fmt: skip
    d50 = mine["ttft_ms"]["p50"] / theirs["ttft_ms"]["p50"] - 1.0
    d99 = mine["ttft_ms"]["p99"] / theirs["ttft_ms"]["p99"] - 1.0
    return [
        Check("p50_at_capacity", p50_goal, _pct(d50), d50 <= -goal.p50_cut + EPS),
        Check("p99_at_capacity", p99_goal, _pct(d99), d99 <= goal.p99_slack + EPS),
    ]


def _costs(rows: Sequence[Row], goal: GoalConfig) -> list[Check]:
    replicated = sum(int(r["bytes_replicated"]) for r in rows)
    used = sum(int(r["bytes_replicated_used"]) for r in rows)
    waste_goal = f"<= {_pct(goal.max_waste, '')} of the bytes copied never used"
    if replicated:
        waste = 1.0 - used / replicated
        shown = f"{waste:.0%} of {replicated / 1e9:,.1f} GB"
        out = [Check("waste", waste_goal, shown, waste <= goal.max_waste + EPS)]
    else:
        out = [Check("waste", waste_goal, "nothing replicated", True)]
    evictions = sum(int(r["active_evictions_by_speculative"]) for r in rows)
    over = max(int(r["peak_speculative_bytes_over_quota"]) for r in rows)
    out.append(Check("active_evictions", "0 (by speculative replicas)", str(evictions),
                     evictions == 0))  # fmt: skip
    out.append(Check("quota_overruns", "0 bytes over quota", str(over), over == 0))
    return out


def _low_load(
    rows: Sequence[Row], routers: Mapping[str, Sequence[Row]], goal: GoalConfig
) -> list[Check]:
    x = goal.low_load
    p50_goal = f"<= its router {_pct(goal.low_load_slack)} at x{x:g}"
    p99_goal = p50_goal
    router = rows[0].get("base_router")
    mine = _at(rows, x)
    theirs = _at(routers.get(router, ()), x) if router else None
    if router is None:
        why = "the summaries do not name its router (base_router): re-run them"
    elif mine is None or theirs is None:
        who = "it" if mine is None else router
        why = f"no run of {who} at x{x:g}: kvcast evaluate --verdict adds it"
    else:
        d50 = mine["ttft_ms"]["p50"] / theirs["ttft_ms"]["p50"] - 1.0
        d99 = mine["ttft_ms"]["p99"] / theirs["ttft_ms"]["p99"] - 1.0
        return [
            Check("low_load_p50", p50_goal, _pct(d50), d50 <= goal.low_load_slack + EPS),
            Check("low_load_p99", p99_goal, _pct(d99), d99 <= goal.low_load_slack + EPS),
        ]
    return [Check("low_load_p50", p50_goal, "-", None, why),
            Check("low_load_p99", p99_goal, "-", None, why)]  # fmt: skip


def loads_needed(summaries: Sequence[Row], goal: GoalConfig) -> list[float]:
    """The loads the verdict reads and the summaries lack: each SLO's bar capacity (when
    bracketed) and the goal's low load; what ``evaluate --verdict`` runs after the search."""
    have = [float(r["time_scale"]) for r in summaries]
    want = [goal.low_load]
    for group in judge(summaries, goal):
        if group.bar_capacity is not None and not group.notes:
            want.append(group.bar_capacity)
    out: list[float] = []
    for x in want:
        if not any(math.isclose(x, h, rel_tol=1e-9) for h in have + out):
            out.append(x)
    return sorted(out)
