"""Vectorised decayed counts equal the direct sum, across chunk borders and block epochs."""

from __future__ import annotations

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.offline.accesses import accesses
from kvcast.features.offline.heat import decayed_counts
from kvcast.features.offline.ingest import event_table


def test_decayed_counts_equal_the_direct_sum_over_long_spans_and_epochs() -> None:
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0, 4e6, 400)).round()  # spans many 64-half-life chunks
    times = np.r_[times, times[-1] + 2e6 + np.arange(5) * 10.0]  # a gap >= horizon
    horizon, h = 1.5e6, 5000.0
    events = [RequestArrived(t, "r", 0, "t", None, 512, 1, (7,)) for t in times]
    cfg = FeatureConfig(nodes=1, horizon_ms=horizon)
    acc = accesses(event_table(events, cfg), horizon)
    got = decayed_counts(acc, h)
    epoch = np.r_[0, np.cumsum(np.diff(times) >= horizon)]
    want = [
        np.exp2(-(t - times[: i + 1][epoch[: i + 1] == epoch[i]]) / h).sum()
        for i, t in enumerate(times)
    ]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
