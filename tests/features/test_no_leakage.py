"""Features at tick t read only events at or before t: rewriting the future changes nothing."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event, RequestArrived, TelemetrySample
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.spec import build_spec

CFG = FeatureConfig(nodes=4, sampling={"negative_keep": 1.0}, labels={"drop_censored": False})
CUT_MS = 300_000.0


def _features_up_to_cut(events: list[Event]) -> pd.DataFrame:
    ticks = np.arange(0.0, CUT_MS + 1, 5000.0)
    df = build_feature_dataset(events, ticks, CFG)
    names = list(build_spec(CFG).names)
    return df.loc[df["tick_ms"] <= CUT_MS, ["tick_ms", "block", *names]].reset_index(drop=True)


def _rewrite_future(events: list[Event], seed: int) -> list[Event]:
    """Keep events <= cut; after it, shuffle block chains between requests, move requests to
    other nodes, scale telemetry and drop a third of the events (times keep their order)."""
    rng = random.Random(seed)
    past = [e for e in events if e.ts_ms <= CUT_MS]
    future = [e for e in events if e.ts_ms > CUT_MS]
    chains = [e.block_hashes for e in future if isinstance(e, RequestArrived)]
    rng.shuffle(chains)
    out, it = [], iter(chains)
    for e in future:
        if rng.random() < 1 / 3:
            continue
        if isinstance(e, RequestArrived):
            e = dataclasses.replace(e, block_hashes=next(it), node=rng.randrange(4))
        elif isinstance(e, TelemetrySample):
            e = dataclasses.replace(e, queue_len=e.queue_len * 3 + 7, evictions_total=0)
        out.append(e)
    return past + out


def test_features_at_t_do_not_change_when_the_future_is_shuffled_and_altered(
    conversation_events: list[Event],
) -> None:
    before = _features_up_to_cut(conversation_events)
    after = _features_up_to_cut(_rewrite_future(conversation_events, seed=7))
    assert len(before) > 10_000
    pd.testing.assert_frame_equal(before, after, check_exact=True)


def test_labels_do_change_when_the_future_changes(conversation_events: list[Event]) -> None:
    ticks = np.arange(0.0, CUT_MS + 1, 5000.0)
    a = build_feature_dataset(conversation_events, ticks, CFG)
    b = build_feature_dataset(_rewrite_future(conversation_events, seed=7), ticks, CFG)
    assert not np.array_equal(a["label_count"].to_numpy(), b["label_count"].to_numpy())
