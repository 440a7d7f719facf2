"""The one rule that keeps training and serving equal: offline rows == FeatureState rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.config import FeatureConfig
from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    ReplicationDone,
    RequestArrived,
    TelemetrySample,
)
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.online.state import FeatureState
from kvcast.features.spec import build_spec

TOLERANCE = 1e-6


def assert_parity(events: list[Event], cfg: FeatureConfig) -> pd.DataFrame:
    df = build_feature_dataset(events, None, cfg)
    names = list(build_spec(cfg).names)
    state = FeatureState(cfg)
    i = 0
    worst = dict.fromkeys(names, 0.0)
    for t, group in df.groupby("tick_ms", sort=True):
        while i < len(events) and events[i].ts_ms <= t:
            state.update(events[i])
            i += 1
        blocks = [int(b) for b in group["block"].to_numpy()]
        assert sorted(state.candidates(t)) == sorted(blocks), f"candidates differ at {t}"
        online = state.rows(t, blocks)
        offline = group[names].to_numpy()
        assert np.array_equal(np.isnan(online), np.isnan(offline)), f"NaNs differ at {t}"
        diff = np.nan_to_num(np.abs(online - offline), nan=0.0).max(axis=0, initial=0.0)
        for name, d in zip(names, diff, strict=True):
            worst[name] = max(worst[name], float(d))
    bad = {name: d for name, d in worst.items() if d > TOLERANCE}
    assert not bad, f"features differ beyond {TOLERANCE}: {bad}"
    state.update_many(events[i:])
    state.flush()
    assert state.counters == df.attrs["bad_input"]
    return df


def test_offline_equals_feature_state_on_the_bundled_conversation_sample(
    conversation_events: list[Event],
) -> None:
    cfg = FeatureConfig(nodes=4, sampling={"negative_keep": 1.0})
    df = assert_parity(conversation_events, cfg)
    assert len(df) > 100_000  # the whole sample: ~120 ticks x ~2000 candidates
    assert df["sess_turns"].max() > 1 and df["fanout"].max() > 100


@st.composite
def streams(draw: st.DrawFn) -> list[Event]:
    """Small streams over few hashes, in any chain order, with every event type."""
    out: list[Event] = []
    ts = 0.0
    for _ in range(draw(st.integers(1, 40))):
        ts += draw(st.sampled_from([0.0, 0.0, 250.0, 1000.0, 4000.0, 30000.0, 90000.0]))
        node = draw(st.integers(0, 3))
        kind = draw(st.integers(0, 9))
        hashes = tuple(draw(st.lists(st.integers(0, 12), min_size=0, max_size=6)))
        if kind <= 4:
            session = draw(st.sampled_from([None, None, "a", "b"]))
            tenant = draw(st.sampled_from(["x", "y"]))
            tokens = draw(st.integers(0, 4000))
            public = draw(st.integers(0, 3))
            out.append(RequestArrived(ts, "r", node, tenant, session, tokens, 1, hashes, public))
        elif kind == 5:
            medium = draw(st.sampled_from(["GPU", "CPU"]))
            out.append(BlockStored(ts, node, hashes, None, 16, medium))
        elif kind == 6:
            out.append(BlockRemoved(ts, node, hashes, draw(st.sampled_from(["GPU", "CPU"]))))
        elif kind == 7:
            out.append(AllBlocksCleared(ts, node))
        elif kind == 8:
            out.append(ReplicationDone(ts, node, (node + 1) % 4, hashes, draw(st.booleans())))
        else:
            q, ev = draw(st.integers(0, 9)), draw(st.integers(0, 50))
            out.append(TelemetrySample(ts, node, q, 100 * q, 0, 0, 1000, 400, 300, 10, ev, 1.0))
    return out


@settings(max_examples=30, deadline=None, database=None)
@given(events=streams())
def test_offline_equals_feature_state_on_arbitrary_small_streams(events: list[Event]) -> None:
    cfg = FeatureConfig(
        nodes=4,
        heat_half_lives_ms=(500.0, 20000.0),
        distinct_window_ms=30000.0,
        horizon_ms=60000.0,
        queue_windows_ms=(5000.0,),
        eviction_window_ms=8000.0,
        ticks={"period_ms": 2500.0, "lookback_ms": 45000.0},
        labels={"drop_censored": False},
        sampling={"negative_keep": 1.0},
    )
    assert_parity(events, cfg)


def test_offline_equals_feature_state_on_the_simulators_own_event_stream() -> None:
    from kvcast.data import bundled_trace_path
    from kvcast.features.traces import load_trace
    from kvcast.simulator.config import SimConfig
    from kvcast.simulator.recording import feature_config_for, record_events

    trace = load_trace(bundled_trace_path("conversation"))
    sim = SimConfig()
    events = record_events(trace, sim, "mooncake_conductor", time_scale=2.0)
    cfg = feature_config_for(sim, trace, FeatureConfig(sampling={"negative_keep": 1.0}))
    df = assert_parity(events, cfg)
    assert len(df) > 50_000
    assert df.attrs["bad_input"]["bad_value"] == 0  # the simulator emits only valid events
    assert df["node_queue_len"].max() > 0 and df["replicas_gpu"].max() > 1
