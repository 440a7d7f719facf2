"""Offline sessions: explicit ids first, else the block after the first branching block, with
prompt-ending partial blocks never making a branch."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvcast.data import bundled_trace_path
from kvcast.features.traces import load_trace
from kvcast.features.traces.agent_config import AgentTraceConfig
from kvcast.features.traces.agent_trace import agent_trace
from kvcast.features.traces.sessions import branching_blocks, session_ids


def table(chains: list[list[int]], sessions: list[str | None] | None = None) -> pd.DataFrame:
    df = pd.DataFrame({"block_hashes": chains})
    if sessions is not None:
        df["session"] = sessions
    return df


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = pd.crosstab(a, b) > 0
    return bool((pairs.sum(axis=1) == 1).all() and (pairs.sum(axis=0) == 1).all())


def test_turns_extending_their_own_chain_stay_one_session() -> None:
    # root 0 shared; conversation A: [0,1,p] then [0,1,3,p']; B: [0,5,q] then [0,5,7,q']
    chains = [[0, 1, 2], [0, 5, 6], [0, 1, 3, 4], [0, 5, 7, 8], [0, 1, 3, 9, 10]]
    got = session_ids(table(chains))
    assert got.tolist() == [0, 1, 0, 1, 0]
    assert branching_blocks(chains) == {0}  # 1 is followed by 2 and 3, but 2 only ends a prompt


def test_explicit_ids_win_and_missing_ones_are_inferred() -> None:
    chains = [[0, 1, 2], [0, 5, 6], [0, 1, 3, 4]]
    got = session_ids(table(chains, ["x", "x", None]))
    assert got[0] == got[1] != got[2]


def test_edge_chains_are_sessions_of_their_own_or_named_by_their_root() -> None:
    chains = [[0, 1, 2], [0, 5, 6], [0], [], [40, 41], [40, 41, 42, 43]]
    got = session_ids(table(chains)).tolist()
    assert got[2] not in (got[0], got[1])  # the shared prompt alone
    assert got[3] not in got[:3] + got[4:]  # no blocks
    assert got[4] == got[5]  # a chain that never branches: one session, named by its root


def test_agent_tasks_are_found_without_their_ids() -> None:
    df = agent_trace(AgentTraceConfig(duration_s=1200.0, apps=12, seed=1))
    got = session_ids(df.drop(columns="session"))
    truth = pd.factorize(df["session"])[0]
    pairs = pd.crosstab(got, truth) > 0
    assert (pairs.sum(axis=1) == 1).all()  # never two tasks in one session
    # a task whose first call adds under one block to the app prompt is split there
    assert (pairs.sum(axis=0) == 1).mean() > 0.9


def test_on_the_chat_trace_a_conversation_is_named_by_its_block_after_the_system_prompt() -> None:
    df = load_trace(bundled_trace_path("conversation")).requests
    chains = list(df["block_hashes"])
    assert all(hs[0] == 0 for hs in chains)  # block 0: the system prompt of every request
    expected = [hs[1] if len(hs) > 1 else f"alone{i}" for i, hs in enumerate(chains)]
    assert same_partition(session_ids(df), pd.factorize(pd.Series(expected, dtype=object))[0])
