"""SeqTracker: in order, gap and publisher restart, tracked per topic."""

from __future__ import annotations

import pytest

pytest.importorskip("msgspec")  # the package imports its codec

from kvcast.serving.kv_events.sequence import SeqStep, SeqTracker, SeqVerdict


def test_first_then_successor_is_in_order():
    t = SeqTracker()
    assert t.observe(b"kv", 5) == SeqStep(SeqVerdict.FIRST)
    assert t.observe(b"kv", 6) == SeqStep(SeqVerdict.NEXT)
    assert t.last(b"kv") == 6


def test_forward_jump_is_a_gap_naming_the_missing_range():
    t = SeqTracker()
    t.observe(b"", 0)
    step = t.observe(b"", 4)
    assert step == SeqStep(SeqVerdict.GAP, 1, 4)
    assert step.missing == 3


def test_going_back_is_a_restart_missing_the_new_process_prefix():
    t = SeqTracker()
    t.observe(b"", 10)
    assert t.observe(b"", 0) == SeqStep(SeqVerdict.RESTART, 0, 0)
    t.observe(b"", 10)
    step = t.observe(b"", 3)
    assert (step.verdict, step.missing) == (SeqVerdict.RESTART, 3)
    assert t.observe(b"", 3).verdict is SeqVerdict.RESTART  # a repeat is a restart too


def test_topics_are_tracked_independently_and_can_be_forgotten():
    t = SeqTracker()
    t.observe(b"a", 7)
    assert t.observe(b"b", 0).verdict is SeqVerdict.FIRST
    assert t.observe(b"a", 8).verdict is SeqVerdict.NEXT
    t.forget(b"a")
    assert t.observe(b"a", 100).verdict is SeqVerdict.FIRST
    t.forget()
    assert t.last(b"b") is None
