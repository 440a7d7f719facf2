"""Distinct keys over a sliding window, kept inline with a pruned dict of older keys."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.online.keys import EMPTY, count_keys, count_many, switch

WINDOW = 100.0


def _see(st: list[Any], key: Any, ts: float) -> None:
    if st[0] == key:
        st[1] = ts
    else:
        switch(st, 0, key, ts, WINDOW)


def test_a_key_counts_while_last_seen_plus_window_is_after_now() -> None:
    st = list(EMPTY)
    _see(st, "a", 0.0)
    _see(st, "b", 50.0)
    _see(st, "a", 60.0)
    assert count_keys(st, 0, 60.0, WINDOW) == 2
    assert count_keys(st, 0, 149.0, WINDOW) == 2
    assert count_keys(st, 0, 150.0, WINDOW) == 1  # b last seen at 50: 50 + 100 <= 150
    assert count_keys(st, 0, 160.0, WINDOW) == 0


def test_the_newest_other_key_is_kept_for_the_branch_test() -> None:
    st = list(EMPTY)
    _see(st, "a", 0.0)
    _see(st, "b", 10.0)
    _see(st, "b", 20.0)
    assert (st[0], st[1], st[2], st[3]) == ("b", 20.0, "a", 0.0)


def test_pruning_older_keys_keeps_counts_exact() -> None:
    st = list(EMPTY)
    for i in range(1000):
        _see(st, i % 300, float(i))
    assert len(st[4]) < 2 * 300
    expected = len({i % 300 for i in range(1000) if i + WINDOW > 999.0})
    assert count_keys(st, 0, 999.0, WINDOW) == expected


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40)), min_size=1, max_size=200),
       st.integers(0, 300))  # fmt: skip
def test_counts_equal_the_distinct_keys_seen_in_the_window_at_or_after_the_last_event(
    stream: list[tuple[int, int]], after: int
) -> None:
    st_, ts, seen = list(EMPTY), 0.0, []
    for key, gap in stream:
        ts += float(gap)
        _see(st_, key, ts)
        seen.append((key, ts))
    now = ts + after
    last: dict[int, float] = {}
    for key, t in seen:
        last[key] = t
    want = sum(1 for t in last.values() if t + WINDOW > now)
    assert count_keys(st_, 0, now, WINDOW) == want
    assert count_many([st_], 0, now, WINDOW).tolist() == [want]


def test_each_switch_drops_the_keys_expired_by_its_time_oldest_first() -> None:
    window, st_ = 20.0, list(EMPTY)
    for i in range(50):
        switch(st_, 0, i, float(i), window)  # a new key every ms: each a switch
    older = st_[4]
    assert list(older) == list(range(30, 49))  # live at 49: seen after 29, in expiry order
    assert list(older.values()) == [k + window for k in range(30, 49)]
    assert count_keys(st_, 0, 49.0, window) == 20  # and the newest, 49
    assert count_keys(st_, 0, 55.0, window) == 14  # 36 .. 49


def test_numpy_times_count_as_python_floats() -> None:
    st_ = list(EMPTY)
    for i, ts in enumerate(np.array([0.0, 10.0, 20.0], np.float32)):
        switch(st_, 0, i, ts, WINDOW)
    assert count_keys(st_, 0, 30.0, WINDOW) == 3
    assert count_many([st_], 0, np.float64(30.0), WINDOW).tolist() == [3.0]
