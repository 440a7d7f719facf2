"""FeatureState: rows in spec order, bad input counted not raised, memory bounded."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest

from kvcast.features.block_meta import tenant_code
from kvcast.features.config import FeatureConfig
from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    ReplicationDone,
    RequestArrived,
    TelemetrySample,
)
from kvcast.features.online.state import MAX_TENANT_CODES, FeatureState


def test_rows_have_the_spec_width_and_nan_for_unknown_blocks_except_residency(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)
    state.update(make_request(0.0, [1, 2], node=1))
    state.update(BlockStored(0.0, 2, (99,), None, 512))
    rows = state.rows(0.0, [1, 99])
    assert rows.shape == (2, len(state.spec))
    assert not np.isnan(rows[0, state.spec.index("heat_1s")])
    unknown = dict(zip(state.spec.names, rows[1], strict=True))
    assert unknown["replicas_gpu"] == 1.0 and unknown["replica_mask"] == 4.0
    assert math.isnan(unknown["heat_1s"]) and math.isnan(unknown["home_holds"])
    assert state.rows(0.0, []).shape == (0, len(state.spec))


def test_bad_input_is_counted_never_raised_and_never_becomes_a_feature_value(
    cfg: FeatureConfig,
    make_request: Callable[..., RequestArrived],
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    state = FeatureState(cfg)
    good = make_telemetry(0.0, 0, queue=3)
    state.update(good)
    state.update(make_request(0.0, [1], node=0))
    state.update(make_request(0.0, [1], node=7))  # unknown node
    state.update(dataclasses.replace(good, ts_ms=1.0, queue_len=-4))  # negative
    state.update(dataclasses.replace(good, ts_ms=1.0, est_queue_ms=float("nan")))
    state.update(make_request(float("nan"), [1]))
    state.update(BlockRemoved(1.0, 0, (1, 2)))  # never stored
    state.update("not an event")  # type: ignore[arg-type]
    state.update(make_request(2.0, [1, 1, 1]))  # repeats
    state.update(make_request(1.5, [1]))  # late
    counts = state.counters
    assert counts["unknown_node"] == 1 and counts["bad_value"] == 3
    assert counts["removed_not_resident"] == 2 and counts["unknown_event"] == 1
    assert counts["duplicate_block_in_request"] == 2 and counts["out_of_order_dropped"] == 1
    row = dict(zip(state.spec.names, state.rows(2.0, [1])[0], strict=True))
    assert row["node_queue_len"] == 3.0 and row["node_est_queue_ms"] == 30.0
    assert row["heat_1s"] < 2.5  # two requests counted, the bad ones not


def test_residency_follows_stores_removals_clears_and_replications(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)
    state.update(make_request(0.0, [5], node=0))
    state.update(BlockStored(0.0, 0, (5,), None, 512))
    state.update(BlockStored(0.0, 1, (5,), None, 512, medium="CPU"))
    state.update(ReplicationDone(1.0, 0, 3, (5,), ok=True))
    state.update(ReplicationDone(1.0, 0, 2, (5,), ok=False))
    names = state.spec.names

    def col(name: str, now: float) -> float:
        return float(state.rows(now, [5])[0, names.index(name)])

    assert (col("replicas_gpu", 1.0), col("replicas_lower", 1.0)) == (2.0, 1.0)
    assert (col("replica_mask", 1.0), col("home_holds", 1.0)) == (9.0, 1.0)
    state.update(BlockRemoved(2.0, 0, (5,)))
    assert (col("replica_mask", 2.0), col("home_holds", 2.0)) == (8.0, 0.0)
    state.update(AllBlocksCleared(3.0, 3))
    state.update(AllBlocksCleared(3.0, 1))
    assert (col("replicas_gpu", 3.0), col("replicas_lower", 3.0)) == (0.0, 0.0)


def test_memory_stays_bounded_by_the_horizon_on_an_endless_stream(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)  # horizon 60 s
    sizes = []
    for i in range(20000):
        ts = i * 100.0  # 2000 s of traffic, every block new, a few sessions
        state.update(make_request(ts, [0, 1000 + i, 10**6 + i], session=f"s{i % 50}"))
        if i % 2000 == 1999:
            sizes.append(state.memory())
    blocks = [s["blocks"] for s in sizes]
    assert max(blocks) <= 2 * 3 * 600 + 3  # at most two horizons of blocks are kept
    assert max(s["sessions"] for s in sizes) <= 50
    assert blocks[-1] <= blocks[2]  # not growing


def test_tenant_codes_stay_bounded_when_every_request_names_a_new_tenant(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    """Tenant ids can be per user or per API key: the code cache must not grow with them."""
    state = FeatureState(cfg)
    n = MAX_TENANT_CODES + 500
    for i in range(n):
        state.update(make_request(i * 10.0, [7, 10**6 + i], tenant=f"user-{i}"))
    state.flush()
    assert state.memory()["tenant_codes"] <= MAX_TENANT_CODES
    row = state.rows(n * 10.0, [10**6 + n - 1])[0]
    assert row[list(state.spec.names).index("tenant_code")] == tenant_code(f"user-{n - 1}")


def test_a_block_cap_forgets_the_least_recently_requested_blocks_first(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    capped, free = FeatureState(cfg, max_blocks=300), FeatureState(cfg)
    hot = [1, 2, 3]
    for i in range(400):  # within one horizon, so only the cap can drop anything
        for state in (capped, free):
            state.update(make_request(i * 10.0, hot if i % 2 else [1000 + i, 2000 + i]))
    capped.flush()
    free.flush()
    sizes = capped.memory()
    assert sizes["blocks"] <= 300 and sizes["shed_blocks"] > 0
    assert free.memory()["blocks"] == 3 + 400 and free.memory()["shed_blocks"] == 0
    now = 4000.0
    names = capped.spec.names
    heat = names.index("heat_1s")
    # the hot prefix, requested all along, is kept with the same row as without a cap (up to
    # the rounding of the decayed sums' rebase at the cap's sweeps)
    np.testing.assert_allclose(capped.rows(now, hot), free.rows(now, hot), rtol=1e-9)
    # the oldest one-off blocks are forgotten (read as never seen), the newest kept
    assert math.isnan(capped.rows(now, [1000])[0, heat])
    assert not math.isnan(capped.rows(now, [1000 + 398])[0, heat])


def test_a_block_cap_below_one_is_refused(cfg: FeatureConfig) -> None:
    with pytest.raises(ValueError, match="max_blocks must be >= 1 or None, got 0"):
        FeatureState(cfg, max_blocks=0)


def test_a_session_cap_forgets_the_least_recently_seen_sessions_first(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg, max_sessions=50)
    for i in range(300):  # every request a new session, all within one horizon
        state.update(make_request(i * 10.0, [5000 + i], session=f"s{i}"))
        if i % 7 == 0:  # one long-lived session, seen all along
            state.update(make_request(i * 10.0 + 1.0, [1, 2], session="kept"))
    state.flush()
    sizes = state.memory()
    assert sizes["sessions"] <= 50 + 1 and sizes["shed_sessions"] > 0
    assert state.sessions.live("kept", 3000.0) is not None
    assert state.sessions.live("s0", 3000.0) is None  # the oldest one-off session is gone
    assert state.sessions.live("s299", 3000.0) is not None
    with pytest.raises(ValueError, match="max_sessions must be >= 1 or None, got 0"):
        FeatureState(cfg, max_sessions=0)
