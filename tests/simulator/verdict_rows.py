"""Summary rows as ``kvcast evaluate`` writes them, made by hand for the goal-check tests."""

from __future__ import annotations

from typing import Any

from kvcast.simulator.goal_config import GoalConfig

GOAL = GoalConfig()
GB = 10**9


def row(policy: str, x: float, *, cap: float | None = None, p50: float = 100.0,
        p99: float = 1000.0, repl: int = 0, used: int = 0, router: str | None = None,
        bound: str | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    r: dict[str, Any] = {
        "policy": policy, "time_scale": x, "ttft_ms": {"p50": p50, "p99": p99},
        "bytes_replicated": repl, "bytes_replicated_used": used,
        "active_evictions_by_speculative": 0, "peak_speculative_bytes_over_quota": 0,
    }  # fmt: skip
    if cap is not None:  # as evaluate writes them: a "lower" bound's edge is in *_bound_*
        r |= {"capacity_time_scale": 0.0 if bound == "lower" else cap, "capacity_bound": bound,
              "capacity_bound_time_scale": cap if bound else None}  # fmt: skip
    if router is not None:
        r["base_router"] = router
    return r | extra


def routers(cap_mc: float = 2.0, cap_dyn: float = 1.0) -> list[dict[str, Any]]:
    """mooncake_conductor (the bar) and dynamo_kv, at x0.5 and at the bar's capacity."""
    return [
        row("mooncake_conductor", 0.5, cap=cap_mc, p50=100, p99=1000),
        row("mooncake_conductor", cap_mc, cap=cap_mc, p50=400, p99=4000),
        row("dynamo_kv", 0.5, cap=cap_dyn, p50=200, p99=2000),
        row("dynamo_kv", cap_mc, cap=cap_dyn, p50=900, p99=9000),
    ]
