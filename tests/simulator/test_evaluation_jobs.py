"""An evaluation in worker processes gives exactly the sequential result, in the order asked."""

from __future__ import annotations

from typing import Any

import pytest

from kvcast.features.traces import Trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.evaluation import evaluate


def _stable(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "sim_wall_s"} for s in summaries]


def test_parallel_evaluation_equals_sequential(bundled_head: Trace) -> None:
    policies = ["oracle", "dynamo_kv", "predictive_recency"]
    one = evaluate(bundled_head, SimConfig(), policies, [1.0, 3.0], jobs=1)
    two = evaluate(bundled_head, SimConfig(), policies, [1.0, 3.0], jobs=2)
    assert _stable(one.summaries) == _stable(two.summaries)
    assert [(s["policy"], s["time_scale"]) for s in two.summaries] == [
        (p, x) for p in policies for x in (1.0, 3.0)
    ]
    assert list(one.ttft) == list(two.ttft)
    for key in one.ttft:
        assert one.ttft[key].equals(two.ttft[key])


def test_jobs_must_be_positive(bundled_head: Trace) -> None:
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        evaluate(bundled_head, SimConfig(), ["dynamo_kv"], jobs=0)
