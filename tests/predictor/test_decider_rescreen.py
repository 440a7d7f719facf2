"""After a command, a tick's screens are made again for the chains they ruled out
(:attr:`Decider.RESCREEN_AT`): a chain still ruled out is skipped, not weighed one by one,
and the commands are those of weighing every chain."""

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
