"""The paced GC: full collections off CPython's schedule while it runs (settings put back
after), run when due and freezing what survives, frozen cycles collected on the thaw
cadence, every pause timed by generation."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from kvcast.serving.gc_pacing import NO_AUTOMATIC_FULL, GcPacer


class Cycle:
    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pacer(clock: Clock) -> Iterator[GcPacer]:
    p = GcPacer(60.0, 2, CollectorRegistry(), "test_", clock)
    p.start()
    try:
        yield p
    finally:
        p.stop()


def _in_old_generation() -> weakref.ref[Cycle]:
    """A reference cycle moved into the oldest generation while alive, then dropped."""
    obj = Cycle()
    gc.collect(1)  # survivors of the two young generations move to the oldest
    return weakref.ref(obj)


def test_start_takes_full_collections_off_the_schedule_and_stop_puts_it_back() -> None:
    before = gc.get_threshold()
    p = GcPacer(60.0, 60, CollectorRegistry())
    p.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NO_AUTOMATIC_FULL)
        assert gc.get_freeze_count() > 0  # what the process held at start
    finally:
        p.stop()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_dead_cycle_in_the_old_generation_waits_for_the_paced_collection(
    pacer: GcPacer, clock: Clock
) -> None:
    ref = _in_old_generation()
    gc.collect(1)  # the young generations, as CPython runs them on its own
    assert ref() is not None
    clock.t = 59.0
    assert not pacer.maybe_collect() and ref() is not None  # not due yet
    clock.t = 60.0
    assert pacer.maybe_collect()
    assert ref() is None
    assert not pacer.maybe_collect()  # the next is due 60 s after this one


def test_frozen_cycles_are_collected_on_the_thaw_cadence(pacer: GcPacer, clock: Clock) -> None:
    obj = Cycle()
    ref = weakref.ref(obj)
    clock.t = 60.0
    assert pacer.maybe_collect()  # 1st: obj is alive, so it is frozen
    del obj
    clock.t = 120.0
    assert pacer.maybe_collect() and pacer.full_collections == 2  # 2nd: thaw_every=2
    assert ref() is None


def test_frozen_cycles_outlive_a_paced_collection_between_thaws(clock: Clock) -> None:
    p = GcPacer(60.0, 3, CollectorRegistry(), "test_", clock)
    p.start()
    try:
        obj = Cycle()
        ref = weakref.ref(obj)
        clock.t = 60.0
        p.maybe_collect()  # frozen alive
        del obj
        clock.t = 120.0
        p.maybe_collect()  # 2nd of 3: the frozen objects are not scanned
        assert ref() is not None
    finally:
        p.stop()
    gc.collect()
    assert ref() is None  # unfrozen by stop, collected as usual


def test_each_collection_is_timed_by_generation_and_kind(clock: Clock) -> None:
    registry = CollectorRegistry()
    p = GcPacer(60.0, 2, registry, "test_", clock)
    p.start()
    try:
        gc.collect(0)
        for t in (60.0, 120.0):
            clock.t = t
            p.maybe_collect()
    finally:
        p.stop()

    def count(gen: str, kind: str) -> float:
        labels = {"generation": gen, "kind": kind}
        return registry.get_sample_value("test_gc_pause_seconds_count", labels) or 0.0

    assert count("0", "auto") >= 1
    assert count("2", "paced") == 2  # start's and the first due one
    assert count("2", "thaw") == 1  # the second: thaw_every=2


def test_no_paced_collection_is_due_right_after_start(pacer: GcPacer) -> None:
    assert not pacer.maybe_collect() and pacer.full_collections == 0


def test_a_stalled_decision_thread_hands_full_collections_back_to_cpython(
    pacer: GcPacer, clock: Clock
) -> None:
    found = gc.get_threshold()
    assert found[2] == NO_AUTOMATIC_FULL
    clock.t = 180.0  # 3 x full_every_s: not yet
    assert not pacer.watch() and gc.get_threshold()[2] == NO_AUTOMATIC_FULL
    clock.t = 181.0
    assert pacer.watch() and gc.get_threshold()[2] != NO_AUTOMATIC_FULL
    assert pacer.maybe_collect()  # the decision thread is back: paced again
    assert gc.get_threshold()[2] == NO_AUTOMATIC_FULL


def test_bad_settings_are_refused_with_their_values() -> None:
    with pytest.raises(ValueError, match=r"got 0\.0, 60"):
        GcPacer(0.0, 60)
    with pytest.raises(ValueError, match=r"got 60\.0, 0$"):
        GcPacer(60.0, 0)


def test_unpaced_it_only_times_the_collections_cpython_runs(clock: Clock) -> None:
    before = gc.get_threshold()
    registry = CollectorRegistry()
    p = GcPacer(60.0, 60, registry, "test_", clock)
    p.start(paced=False)
    try:
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        clock.t = 120.0
        assert not p.maybe_collect()
        gc.collect(1)
    finally:
        p.stop()
    labels = {"generation": "1", "kind": "auto"}
    assert registry.get_sample_value("test_gc_pause_seconds_count", labels) == 1
    assert gc.callbacks.count(p._timed) == 0
