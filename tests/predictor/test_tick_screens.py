"""The tick screens (:mod:`kvcast.predictor.tick_screens`): after a command they are made
again for the chains they ruled out (:attr:`Decider.RESCREEN_AT`): a chain still ruled out is
skipped, not weighed one by one, and the commands are those of weighing every chain."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from decider_views import CHAIN, EveryChain, ScreensAgain, decider_cfg, view

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import ReplicateCommand
from kvcast.predictor.decider import Decider

# CHAIN, held on the busiest node and likely, is copied; as many chains as the default
# RESCREEN_AT, which no node holds (nothing to copy: ruled out by the screens), follow it in
# the tick's order (less likely)
OTHERS = [tuple(range(100 * k, 100 * k + 5)) for k in range(1, Decider.RESCREEN_AT + 1)]
CANDS = ChainCandidates.build([CHAIN, *OTHERS])
PROBS = np.array([0.9] * len(CHAIN) + [0.3] * 5 * len(OTHERS))


def _counting(cls: type[Decider]) -> tuple[Decider, list[int], list[int]]:
    """A decider of ``cls`` that counts its screens and the chains it weighs one by one."""
    screens: list[int] = []
    weighed: list[int] = []

    class Counting(cls):  # type: ignore[valid-type,misc]
        def _may_copy(self, *args: Any) -> list[int]:
            screens.append(1)
            return super()._may_copy(*args)

        def _best_option(self, *args: Any) -> Any:
            weighed.append(1)
            return super()._best_option(*args)

    return Counting(decider_cfg()), screens, weighed


@pytest.mark.parametrize("cls", [Decider, ScreensAgain])
def test_after_a_command_the_chains_ruled_out_are_screened_again_not_weighed(
    cls: type[Decider],
) -> None:
    decider, screens, weighed = _counting(cls)
    out = decider.decide(CANDS, PROBS, view())
    assert [c.block_hashes[-1] for c in out if isinstance(c, ReplicateCommand)] == [CHAIN[-1]]
    assert len(screens) == 2  # as the tick starts, and once after the command
    assert len(weighed) == decider.cfg.targets.max_targets_per_chain  # CHAIN's targets alone
    assert out == EveryChain(decider_cfg()).decide(CANDS, PROBS, view())


def test_with_fewer_chains_left_than_rescreen_at_they_are_weighed_one_by_one() -> None:
    class Never(Decider):
        RESCREEN_AT = len(OTHERS) + 1

    decider, screens, weighed = _counting(Never)
    out = decider.decide(CANDS, PROBS, view())
    assert len(screens) == 1  # the tick's start only
    assert len(weighed) > decider.cfg.targets.max_targets_per_chain  # the others weighed too
    assert out == EveryChain(decider_cfg()).decide(CANDS, PROBS, view())


@pytest.mark.parametrize("cls", [Decider, ScreensAgain])
def test_a_chain_ruled_out_as_the_tick_starts_is_copied_once_a_command_moved_load(
    cls: type[Decider],
) -> None:
    """Two copies of tenant a's chains move load off busy node 0; tenant b's nine chains,
    held on node 2, which no copy to node 0 paid for as the tick started, are screened again
    and copied to node 0 (node 1 serves tenant a only), as when weighing every chain."""
    first, second = tuple(range(1, 11)), tuple(range(20, 32))
    others = [tuple(range(100 * k, 100 * k + 10)) for k in range(1, 10)]
    holders = {b: 0b001 for b in first + second} | {b: 0b100 for c in others for b in c}
    cands = ChainCandidates.build([first, second, *others], tenants=["a", "a"] + ["b"] * 9,
                                  tail_tokens=[512, 20000] + [512] * 9)  # fmt: skip
    probs = np.array([1.0] * 22 + [0.6] * 90)
    tick = view(queue=(300.0, 0.0, 600.0), holders=holders, bytes_per_ms=1.1e7,
                node_tenants=(frozenset("ab"), frozenset("a"), frozenset("b")))  # fmt: skip
    decider = cls(decider_cfg())
    verdicts: list[list[bool]] = []
    cannot_pay = decider._cannot_pay

    def spy(*args: Any) -> list[bool]:
        verdicts.append(cannot_pay(*args))
        return verdicts[-1]

    decider._cannot_pay = spy  # type: ignore[method-assign]
    out = decider.decide(cands, probs, tick)
    assert verdicts[0][2:] == [True] * 9  # every chain of tenant b ruled out as it starts
    moves = [(c.source, c.target) for c in out if isinstance(c, ReplicateCommand)]
    assert moves[:2] == [(0, 1), (0, 1)] and (2, 0) in moves[2:]  # b's copied TO the source
    assert out == EveryChain(decider_cfg()).decide(cands, probs, tick)
