"""Session naming (explicit ids, else the prefix rule) and the inter-arrival recurrence."""

from __future__ import annotations

import math
from collections.abc import Callable

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.sessions import SessionTable
from kvcast.features.online.state import FeatureState

PROMPT = 0


def _owner(state: FeatureState, h: int) -> object:
    k = state.blocks.k
    return state.blocks.run_of[h][k + 2][2]  # the last request's session name


def test_turns_of_a_conversation_share_its_name_once_the_prompt_is_seen_shared(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)
    state.update(make_request(0.0, [PROMPT, 10, 11]))
    assert _owner(state, 10) == PROMPT  # one conversation so far: named by its root
    state.update(make_request(1.0, [PROMPT, 20]))
    assert _owner(state, 20) == 20
    state.update(make_request(2.0, [PROMPT, 10, 11, 12]))
    state.update(make_request(3.0, [PROMPT, 10, 11, 12, 13]))
    assert _owner(state, 13) == 10
    assert state.sessions.sessions[10][1] == 2.0  # two turns named 10


def test_a_request_without_blocks_has_no_session_and_one_block_is_named_by_it(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)
    state.update(make_request(0.0, [PROMPT, 1]))
    state.update(make_request(1.0, [PROMPT, 2]))
    state.update(make_request(2.0, []))
    assert len(state.sessions) == 2
    state.update(make_request(3.0, [PROMPT]))
    assert _owner(state, PROMPT) == PROMPT


def test_explicit_session_ids_win_over_the_prefix_rule(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    state = FeatureState(cfg)
    state.update(make_request(0.0, [PROMPT, 1], session="chat-7"))
    assert _owner(state, 1) == "chat-7"
    row = state.rows(0.0, [1])[0]
    assert row[state.spec.index("sess_explicit")] == 1.0


def test_gap_ewma_and_variance_follow_the_recurrence() -> None:
    table = SessionTable(alpha=0.5, horizon_ms=1e9)
    for ts in (0.0, 10.0, 30.0, 60.0):
        table.observe("s", ts)
    last, turns, ewma, var = table.sessions["s"]
    # gaps 10, 20, 30: ewma 10 -> 15 -> 22.5; var 0 -> 0.5*(0+10*5)=25 -> 0.5*(25+15*7.5)
    assert (last, turns) == (60.0, 4.0)
    assert math.isclose(ewma, 22.5) and math.isclose(var, 0.5 * (25.0 + 15.0 * 7.5))


def test_a_session_unseen_for_the_horizon_starts_again_at_one_turn() -> None:
    table = SessionTable(alpha=0.5, horizon_ms=100.0)
    table.observe("s", 0.0)
    table.observe("s", 100.0)
    assert table.sessions["s"][1] == 1.0 and math.isnan(table.sessions["s"][2])
