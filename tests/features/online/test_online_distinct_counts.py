"""Distinct sessions and tenants per block, through the feature state (runs, splits, the
older keys pruned at each switch): equal to a brute-force count of the requests in the
window, at any query time at or after the last request."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.state import FeatureState

WINDOW = 100.0
CHAINS = ((1, 2, 3, 4), (1, 2), (1, 2, 5), (1,), (6, 7), (6,), (1, 2, 3))  # shared prefixes


def _state() -> FeatureState:
    return FeatureState(FeatureConfig(distinct_window_ms=WINDOW))


def _brute(seen: list[tuple[float, tuple[int, ...], str, str]], block: int, now: float,
           kind: int) -> int:  # fmt: skip
    last: dict[str, float] = {}
    for ts, chain, session, tenant in seen:
        if block in chain:
            key = session if kind == 0 else tenant
            last[key] = ts
    return sum(1 for t in last.values() if t + WINDOW > now)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, len(CHAINS) - 1), st.integers(0, 5),
                  st.integers(0, 2)),
        min_size=1, max_size=40,
    ),
    st.integers(0, 150),
)  # fmt: skip
def test_distinct_sessions_and_tenants_equal_a_brute_force_count(
    requests: list[tuple[int, int, int, int]], after: int
) -> None:
    state, seen, ts = _state(), [], 0.0
    for i, (gap, c, session, tenant) in enumerate(requests):
        ts += float(gap)
        chain, s, t = CHAINS[c], f"s{session}", f"t{tenant}"
        state.update(RequestArrived(ts, f"r{i}", 0, t, s, 512 * len(chain), 8, chain))
        seen.append((ts, chain, s, t))
    now = ts + after
    blocks = sorted({b for _, chain, _, _ in seen for b in chain})
    rows = state.rows(now, blocks)
    names = state.spec.names
    for j, block in enumerate(blocks):
        got = dict(zip(names, rows[j], strict=True))
        assert got["distinct_sessions"] == _brute(seen, block, now, 0), block
        assert got["distinct_tenants"] == _brute(seen, block, now, 1), block


def test_a_split_run_keeps_session_keys_of_its_own() -> None:
    """Block 2's run is split from block 1's after an older session's keys expired: the two
    runs must not share one (empty) dict of older keys and count each other's sessions."""
    state = _state()
    for i, (ts, chain, session) in enumerate([(0.0, (1, 2), "a"), (200.0, (1, 2), "b"),
                                              (210.0, (1,), "c"), (220.0, (1,), "d")]):  # fmt: skip
        state.update(RequestArrived(ts, f"r{i}", 0, "t", session, 512 * len(chain), 8, chain))
    col = state.spec.index("distinct_sessions")
    assert state.rows(220.0, [1, 2])[:, col].tolist() == [3.0, 1.0]
