"""The predictive-replication goal as numbers: what ``kvcast verdict`` judges a replicating
policy by (``configs/goals/predictive-replication.yaml``; the embedded defaults are the
predictive-replication issue's goal)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from kvcast.config import FiniteConfig, load_config

ANCHORS = ("dynamo_kv", "llmd_precise", "sglang_cache_aware", "aibrix_prefix", "mooncake_conductor")
"""The anchors' own routing rules: the best of them on a trace is the bar."""


class GoalConfig(FiniteConfig):
    routers: tuple[str, ...] = ANCHORS  # the best of these (highest capacity) is the bar
    capacity_gain: float = Field(0.15, ge=0)  # capacity at least this much above the bar's
    oracle_share: float = Field(0.70, ge=0, le=1)  # ... and this share of the oracle's gain
    p50_cut: float = Field(0.30, ge=0, lt=1)  # at the bar's capacity load: P50 this much lower
    p99_slack: float = Field(0.02, ge=0)  # ... and P99 at most this much higher
    max_waste: float = Field(0.25, ge=0, le=1)  # share of replicated bytes never used
    low_load: float = Field(0.5, gt=0)  # the time-scale where prediction must cost ~nothing:
    low_load_slack: float = Field(0.02, ge=0)  # P50 and P99 within this of its router alone

    @field_validator("routers")
    @classmethod
    def _some_router(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("name at least one router to judge against")
        if len(set(v)) != len(v):
            raise ValueError(f"a router is named twice: {list(v)}")
        from kvcast.simulator.policies import policy_names
        from kvcast.simulator.replication_policies import replicating_policy_names

        routers = sorted(set(policy_names()) - set(replicating_policy_names()))
        unknown = [name for name in v if name not in routers]
        if unknown:
            raise ValueError(f"not a router: {unknown[0]!r}; routers: {', '.join(routers)}")
        return v


def load_goal_config(path: str | Path | None = None) -> GoalConfig:
    """Load a goal config; ``None`` gives the embedded defaults (the issue's goal)."""
    return GoalConfig() if path is None else load_config(GoalConfig, path)
