"""Distinct keys over a sliding window, kept inline with a pruned dict of older keys."""

from __future__ import annotations

from typing import Any

from kvcast.features.online.keys import EMPTY, count_keys, switch

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
