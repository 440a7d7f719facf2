"""Inputs outside what kvcast's own producers send, read the same way online and offline: a
missing session as NaN or pd.NA, a node id given as a float, a negative block id (the trace
loaders and load scaling make those), near-equal windows, and a clear that opens a Dask window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvcast.features.config import FeatureConfig
from kvcast.features.events import AllBlocksCleared, BlockStored, RequestArrived, TelemetrySample
from kvcast.features.offline.dask_engine import _plan
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.offline.windowed import window_rows
from kvcast.features.online.state import FeatureState
from kvcast.features.validate import check

CFG = FeatureConfig(nodes=4, sampling={"negative_keep": 1.0}, labels={"drop_censored": False},
                    ticks={"period_ms": 1000.0, "lookback_ms": 10000.0})  # fmt: skip


def req(ts: float, hashes: tuple[int, ...], session: object = None) -> RequestArrived:
    return RequestArrived(ts, f"r{ts}", 0, "t", session, 512 * len(hashes), 1, hashes)  # type: ignore[arg-type]


def online_row(events: list, t: float, block: int, cfg: FeatureConfig = CFG) -> np.ndarray:
    state = FeatureState(cfg)
    state.update_many(events)
    return state.rows(t, [block])[0]


@pytest.mark.parametrize("missing", [float("nan"), pd.NA])
def test_a_missing_session_given_as_nan_or_na_is_inferred_on_both_paths(missing: object) -> None:
    events = [req(0.0, (1, 2), missing), req(1000.0, (1, 2), missing)]
    df = build_feature_dataset(events, np.array([1000.0]), CFG)
    names = list(FeatureState(CFG).spec.names)
    offline = df[df["block"] == 1][names].to_numpy()[0]
    online = online_row(events, 1000.0, 1)
    for name in ("sess_explicit", "sess_turns"):
        i = names.index(name)
        assert online[i] == offline[i]
    assert offline[names.index("sess_turns")] == 2.0


def test_an_integral_float_node_is_that_node_and_a_fraction_is_refused() -> None:
    tel = TelemetrySample(0.0, 1.0, 1, 1, 0, 0, 10, 1, 1, 0, 0, 1.0)  # type: ignore[arg-type]
    stored = BlockStored(0.0, 1.0, (7,), None, 512)  # type: ignore[arg-type]
    state = FeatureState(CFG)
    state.update_many([tel, stored])  # counted or applied, never raised
    assert state.residency.masks([7])[0] == [0b10]  # on node 1
    assert check(BlockStored(0.0, 1.5, (7,), None, 512), 4) == "unknown_node"  # type: ignore[arg-type]


def test_a_negative_block_id_is_its_u64_on_both_paths() -> None:
    events = [req(0.0, (-1,)), BlockStored(0.0, 0, (2**64 - 1,), None, 512)]
    df = build_feature_dataset(events, np.array([0.0]), CFG)
    assert df["replicas_gpu"].item() == 1.0 and int(df["block"].item()) == 2**64 - 1
    state = FeatureState(CFG)
    state.update_many(events)
    assert state.candidates(0.0) == [2**64 - 1]
    assert state.rows(0.0, [-1])[0][state.spec.index("replicas_gpu")] == 1.0


def test_windows_whose_feature_names_would_collide_are_refused() -> None:
    with pytest.raises(ValueError, match="collide"):
        FeatureConfig(heat_half_lives_ms=(5000.0, 1234567.0, 1234568.0))


def test_a_clear_before_a_dask_windows_first_request_clears_its_snapshot() -> None:
    cfg = FeatureConfig(
        nodes=4, heat_half_lives_ms=(1000.0, 10000.0), distinct_window_ms=20000.0,
        horizon_ms=60000.0, queue_windows_ms=(3000.0,), eviction_window_ms=3000.0,
        ticks={"period_ms": 1000.0, "lookback_ms": 10000.0},
        labels={"horizon_ms": 5000.0, "drop_censored": False}, sampling={"negative_keep": 1.0},
    )  # fmt: skip
    events = [req(0.0, (1,)), BlockStored(0.0, 0, (1,), None, 512), AllBlocksCleared(45000.0, 0),
              req(48000.0, (1,)), req(55000.0, (2,))]  # fmt: skip
    ref = build_feature_dataset(events, None, cfg)
    cfg2, _, _, inputs = _plan(events, None, cfg, 10000.0)
    got = pd.concat([window_rows(w, cfg2) for w in inputs])
    pick = lambda df: df[(df["tick_ms"] == 50000.0) & (df["block"] == 1)]  # noqa: E731
    assert pick(ref)["replicas_gpu"].item() == 0.0  # node 0 dropped it at 45 s
    for col in ("replicas_gpu", "home_holds"):
        assert pick(got)[col].item() == pick(ref)[col].item()
