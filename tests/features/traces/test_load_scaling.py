"""Load scaling: ``arrivals`` compresses every arrival; ``sessions`` replays X times as many
sessions over the same span, each with its own gaps, private blocks renamed per replay and
blocks shared between sessions kept."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvcast.features.traces.agent_config import AgentTraceConfig
from kvcast.features.traces.agent_trace import agent_trace
from kvcast.features.traces.load_scaling import scale_load
from kvcast.features.traces.table import Trace, make_table


@pytest.fixture(scope="module")
def trace() -> Trace:
    df = agent_trace(AgentTraceConfig(duration_s=900.0, tasks_per_s=0.3, seed=2))
    table = make_table(
        arrival_ms=df["arrival_ms"].to_numpy(), input_tokens=df["input_tokens"].to_numpy(),
        output_tokens=df["output_tokens"].to_numpy(), block_hashes=list(df["block_hashes"]),
        request_id=[f"r{i}" for i in range(len(df))], session=list(df["session"]),
    )  # fmt: skip
    return Trace(table, "agent", block_size=512)


def replays(t: Trace) -> pd.DataFrame:
    """Each request's original id and replay number."""
    df = t.requests.copy()
    parts = df["request_id"].str.split("~")
    df["origin"] = parts.str[0]
    df["replay"] = parts.str[1].fillna("0").astype(int)
    return df


def span(t: Trace) -> float:
    a = t.requests["arrival_ms"]
    return float(a.max() - a.min() + np.median(np.diff(np.unique(a))))


def test_arrivals_divides_every_arrival(trace: Trace) -> None:
    got = scale_load(trace, 4.0, "arrivals").requests
    assert np.allclose(got["arrival_ms"], trace.requests["arrival_ms"] / 4.0)


def test_sessions_replays_every_session_x_times_keeping_its_gaps(trace: Trace) -> None:
    src = trace.requests.set_index("request_id")
    got = replays(scale_load(trace, 3.0, "sessions", seed=1))
    assert len(got) == 3 * len(src) and got["arrival_ms"].is_monotonic_increasing
    assert got.groupby("origin").size().eq(3).all()
    first = got[got["replay"] == 0].set_index("origin")
    assert np.array_equal(first.loc[src.index, "arrival_ms"], src["arrival_ms"])  # as recorded
    width = span(trace)
    for (_, k), part in got[got["replay"] > 0].groupby(["session", "replay"]):
        orig = src.loc[part["origin"], "arrival_ms"].to_numpy()
        shift = (part["arrival_ms"].to_numpy() - orig) % width
        assert np.allclose(shift, shift[0]) or np.allclose((shift - shift[0]) % width, 0.0)
        assert part["session"].str.endswith(f"~{k}").all()


def test_private_blocks_are_renamed_per_replay_and_shared_ones_kept(trace: Trace) -> None:
    src = trace.requests.set_index("request_id")
    users: dict[int, set[str]] = {}
    for sess, hs in zip(src["session"], src["block_hashes"], strict=True):
        for h in hs:
            users.setdefault(h, set()).add(sess)
    shared = {h for h, u in users.items() if len(u) > 1}
    assert shared  # the agents' app prompts
    got = replays(scale_load(trace, 2.0, "sessions", seed=1))
    for row in got[got["replay"] == 1].itertuples():
        orig = src.loc[row.origin, "block_hashes"]
        assert len(row.block_hashes) == len(orig)
        for new, old in zip(row.block_hashes, orig, strict=True):
            assert (new == old) == (old in shared)
            assert new not in users or new in shared
    # within one replay a session's chain still extends itself: same renaming per block
    got["recorded"] = src.loc[got["origin"], "arrival_ms"].to_numpy()
    one = got[(got["replay"] == 1)].sort_values("recorded").groupby("session")["block_hashes"]
    for _, chains in one:  # in the order of the recorded turns (a replay may wrap around)
        chains = list(chains)
        for a, b in pairwise(chains):
            assert b[: len(a) - 1] == a[: len(a) - 1]


def test_fractions_thin_or_add_sessions_and_starts_scale_with_x(trace: Trace) -> None:
    n_sess = trace.requests["session"].nunique()
    for x in (0.5, 2.5):
        got = scale_load(trace, x, "sessions", seed=3).requests
        starts = got.groupby("session")["arrival_ms"].min()
        assert abs(len(starts) - x * n_sess) < 4 * np.sqrt(n_sess)
        assert got["arrival_ms"].min() >= trace.requests["arrival_ms"].min()
        assert got["arrival_ms"].max() < trace.requests["arrival_ms"].min() + span(trace)


def test_the_seed_decides_the_replays(trace: Trace) -> None:
    a = scale_load(trace, 2.5, "sessions", seed=4).requests
    pd.testing.assert_frame_equal(a, scale_load(trace, 2.5, "sessions", seed=4).requests)
    other = scale_load(trace, 2.5, "sessions", seed=5).requests
    assert not a["arrival_ms"].equals(other["arrival_ms"])


def test_factor_one_is_the_trace_and_bad_input_is_refused(trace: Trace) -> None:
    assert scale_load(trace, 1.0, "sessions") is trace
    with pytest.raises(ValueError, match="positive finite number, got 0"):
        scale_load(trace, 0.0, "sessions")
    with pytest.raises(ValueError, match="unknown load scaling 'users'"):
        scale_load(trace, 2.0, "users")  # type: ignore[arg-type]


def small(
    chains: list[list[int]], session: list[str], request_id: list[str] | None = None
) -> Trace:
    n = len(chains)
    extra = {} if request_id is None else {"request_id": request_id}
    table = make_table(arrival_ms=[500.0 * i for i in range(n)], input_tokens=[512] * n,
                       output_tokens=[1] * n, block_hashes=chains, session=session,
                       **extra)  # fmt: skip
    return Trace(table, "t", block_size=512)


def test_fresh_block_ids_go_below_the_trace_when_its_ids_reach_the_int64_maximum() -> None:
    top = 2**63 - 1
    out = scale_load(small([[7, top], [7, 3]], ["a", "b"]), 2.0, "sessions", seed=0).requests
    replays = out[out["request_id"].str.contains("~")]
    renamed = {h for hs in replays["block_hashes"] for h in hs[1:]}
    assert len(renamed) == 2 and not renamed & {7, 3, top}
    assert all(-(2**63) <= h <= top for h in renamed)
    assert all(hs[0] == 7 for hs in out["block_hashes"])  # shared by both sessions: kept


def test_unknown_empty_sessions_stay_unknown_in_the_replays() -> None:
    from kvcast.features.traces.sessions import session_ids

    chains = [[0, 1, 2], [0, 5, 6], [0, 1, 3, 4], [0, 5, 7, 8]]
    out = scale_load(small(chains, [""] * 4), 2.0, "sessions", seed=0).requests
    assert set(out["session"]) == {""}
    assert len(set(session_ids(out).tolist())) == 4  # 2 sessions x 2, inferred apart


def test_replay_names_never_take_an_existing_request_or_session_name() -> None:
    tr = small([[1], [2], [3]], ["a", "b", "a~1"], request_id=["r1", "r1~1", "r2"])
    out = scale_load(tr, 2.0, "sessions", seed=0).requests
    assert len(out) == 6 and out["request_id"].is_unique
    assert out["session"].nunique() == 6  # "a~1" and the replay of "a" stay two sessions


def test_fresh_block_ids_of_a_u64_trace_stay_u64_and_alias_no_block_of_the_trace(
    tmp_path: Path,
) -> None:
    from kvcast.features.traces import write_parquet

    top = 2**64 - 1  # a u64 hash; downstream, -1 would name this same block
    trace = small([[0, top], [0, 1]], ["a", "b"])
    out = scale_load(trace, 2.0, "sessions", seed=0).requests
    replays = out[out["request_id"].str.contains("~")]
    renamed = {h for hs in replays["block_hashes"] for h in hs[1:]}
    assert len(renamed) == 2 and all(0 <= h <= top for h in renamed)
    assert not {h % 2**64 for h in renamed} & {0, 1, top}
    write_parquet(Trace(out, "t", 512), tmp_path / "t.parquet")
