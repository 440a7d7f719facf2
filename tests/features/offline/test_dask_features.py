"""The Dask engine builds the pandas path's dataset: same rows, features within 1e-9."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from kvcast.data import bundled_trace_path
from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event
from kvcast.features.offline.carry import carried_state
from kvcast.features.offline.dask_engine import _plan, build_feature_dataset_dask
from kvcast.features.offline.ingest import event_table
from kvcast.features.offline.partitions import overlap_ms, plan_windows
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.offline.windowed import window_rows
from kvcast.features.traces import load_trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.recording import feature_config_for, record_events

TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def replay() -> tuple[list[Event], FeatureConfig]:
    """The bundled conversation sample (10 minutes) replayed by the simulator, with windows
    short enough that block epochs, sessions and residency cross many window starts."""
    trace = load_trace(bundled_trace_path("conversation"))
    sim = SimConfig()
    base = FeatureConfig(horizon_ms=120_000.0, distinct_window_ms=30_000.0)
    return record_events(trace, sim), feature_config_for(sim, trace, base)


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def by_block(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["block", "tick_ms"], kind="stable").reset_index(drop=True)


def assert_same_dataset(ref: pd.DataFrame, got: pd.DataFrame) -> None:
    assert list(got.columns) == list(ref.columns)
    assert len(got) == len(ref) > 0
    got = by_block(got)
    for col in ref.columns:
        a, b = ref[col].to_numpy(), got[col].to_numpy()
        assert a.dtype == b.dtype, col
        if a.dtype.kind == "f":
            assert np.array_equal(np.isnan(a), np.isnan(b)), col
            ok = ~np.isnan(a)
            assert np.abs(a[ok] - b[ok]).max(initial=0.0) <= TOLERANCE, col
        else:
            assert np.array_equal(a, b), col


def test_dask_engine_on_two_worker_cluster_equals_pandas_rows_and_features(
    replay: tuple[list[Event], FeatureConfig], client: object
) -> None:
    events, cfg = replay
    ref = build_feature_dataset(events, cfg.ticks, cfg)
    got = build_feature_dataset_dask(events, cfg.ticks, cfg, client=client, window_ms=60_000.0)
    assert_same_dataset(ref, got)
    assert got.attrs == ref.attrs
    assert len(client.scheduler_info()["workers"]) == 2


def test_windows_without_the_carried_state_would_differ(
    replay: tuple[list[Event], FeatureConfig],
) -> None:
    """The overlap alone is not enough: a window whose long-memory state is computed from its
    own (truncated) events gets epoch ages and heat wrong; the carried state fixes them."""
    events, cfg = replay
    ref = build_feature_dataset(events, cfg.ticks, cfg)
    cfg, _, _, inputs = _plan(events, cfg.ticks, cfg, 60_000.0)
    last = list(inputs)[-1]
    local = carried_state(last.table, cfg)
    truncated = replace(last, epoch_ts=local.epoch_ts, heat=local.heat)
    mine = ref[ref["tick_ms"] >= last.window.ticks[0]]
    exact, wrong = by_block(window_rows(last, cfg)), by_block(window_rows(truncated, cfg))
    assert np.allclose(exact["age_first_ms"], by_block(mine)["age_first_ms"], atol=TOLERANCE)
    assert (wrong["age_first_ms"] < exact["age_first_ms"] - 1.0).any()


def test_windows_own_each_tick_once_and_read_the_overlap_before_it() -> None:
    cfg = FeatureConfig()
    ticks = 5000.0 * np.arange(1000)
    windows = plan_windows(ticks, 600_000.0, cfg)
    assert np.array_equal(np.concatenate([w.ticks for w in windows]), ticks)
    assert all(w.start_ms == w.ticks[0] - overlap_ms(cfg) for w in windows)
    assert all(w.end_ms == w.ticks[-1] + cfg.labels.horizon_ms for w in windows)
    assert overlap_ms(cfg) == 2 * cfg.distinct_window_ms
    with pytest.raises(ValueError, match="window_ms"):
        plan_windows(ticks, 0.0, cfg)


@pytest.mark.parametrize(
    ("ticks", "window_ms"),
    [(np.array([0.0, 5000.0]), 5000.0 / 3), (12345.6 + 250.0 * np.arange(49), 1000.0 / 3)],
)
def test_a_window_length_that_does_not_divide_the_span_still_owns_the_last_tick(
    ticks: np.ndarray, window_ms: float
) -> None:
    windows = plan_windows(ticks, window_ms, FeatureConfig())
    assert np.array_equal(np.concatenate([w.ticks for w in windows]), ticks)
    assert [w.index for w in windows] == list(range(len(windows)))


def test_another_job_on_the_same_cluster_never_lends_its_results(
    replay: tuple[list[Event], FeatureConfig], client: object
) -> None:
    """Task keys are this run's own: a shared scheduler holding another client's
    ``window-0`` (the keys' old form) must not hand its result back."""
    from distributed import Client

    events, cfg = replay
    ref = build_feature_dataset(events, cfg.ticks, cfg)
    with Client(client.scheduler.address) as theirs:  # type: ignore[attr-defined]
        held = [theirs.submit(pd.DataFrame, {"x": [i]}, key=f"window-{i}", pure=False)
                for i in range(12)]  # fmt: skip
        theirs.gather(held)
        got = build_feature_dataset_dask(events, cfg.ticks, cfg, client=client, window_ms=60_000.0)
    assert_same_dataset(ref, got)


def test_window_snapshot_keeps_blocks_stored_before_the_window(
    replay: tuple[list[Event], FeatureConfig],
) -> None:
    """Residency outlives every window: the snapshot stores what each node held."""
    events, cfg = replay
    table = event_table(events, cfg)
    _, _, _, inputs = _plan(table, cfg.ticks, cfg, 60_000.0)
    later = list(inputs)[-1]
    snapshot = later.table.s_ts == later.window.start_ms
    assert snapshot.any()
    assert (table.s_ts < later.window.start_ms).sum() > snapshot.sum()  # a compression


def test_a_local_cluster_without_workers_is_refused_not_waited_on() -> None:
    from kvcast.features.dask_client import dask_client

    with pytest.raises(ValueError, match="at least 1 worker, got 0"), dask_client("local", 0):
        pass


def test_every_worker_of_a_cluster_over_five_is_listed() -> None:
    """distributed 2025.5-2026.6 list five workers unless asked for all (n_workers=-1);
    releases before that take no such argument and list all."""
    from distributed import Client, LocalCluster

    from kvcast.features.dask_client import worker_addresses

    with (
        LocalCluster(
            n_workers=6, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        assert len(worker_addresses(c)) == 6

    class Capped:  # the 2025.5-2026.6 signature: five unless n_workers says otherwise
        def scheduler_info(self, n_workers: int = 5) -> dict:
            every = [f"tcp://w{i}" for i in range(8)]
            return {"workers": dict.fromkeys(every if n_workers < 0 else every[:n_workers])}

    class Before:  # releases before it: no argument, every worker
        def scheduler_info(self) -> dict:
            return {"workers": dict.fromkeys(f"tcp://w{i}" for i in range(8))}

    assert len(worker_addresses(Capped())) == len(worker_addresses(Before())) == 8
