"""The decider's P(hit) is corrected by what became of its own copies: used (requested while
alive and routed to the copy's node) per copy expected (the P it was made with)."""

from __future__ import annotations

import random

import pytest
from decider_views import CHAIN, decider_cfg, one_chain, view
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.predictor.commands import ReplicateCommand
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import FeedbackConfig
from kvcast.predictor.outcome_feedback import OutcomeFeedback

HOUR = 3_600_000.0


def test_without_copies_the_factor_is_one() -> None:
    assert OutcomeFeedback(FeedbackConfig()).factor(0.0) == 1.0
    fb = OutcomeFeedback(FeedbackConfig(count_live=False))
    fb.watch(7, node=1, expiry_ms=1_000.0, p=0.5)
    assert fb.factor(500.0) == 1.0 and len(fb) == 1  # watched, not settled, not counted


def test_live_copies_count_as_expected_and_not_yet_used_until_they_settle() -> None:
    fb = OutcomeFeedback(FeedbackConfig(strength=5.0, half_life_ms=HOUR))
    for b in range(10):  # a burst of copies, no outcome back yet
        fb.watch(b, node=1, expiry_ms=1_000.0, p=0.5, source=0)
    assert fb.factor(0.0) == pytest.approx(5.0 / (5.0 + 5.0))  # held back by its own bet
    fb.observe(1, [3], 10.0)  # one used: settled, out of the live sum into both sums
    assert fb.factor(10.0) == pytest.approx((5.0 + 1.0) / (5.0 + 0.5 + 4.5), rel=1e-6)
    fb.forget(1, [0, 1])  # gone before their request: no longer live, and not learnt from
    assert fb.factor(10.0) == pytest.approx((5.0 + 1.0) / (5.0 + 0.5 + 3.5), rel=1e-6)
    fb.expire(1_000.0)  # the rest expire unused: the same weight, now settled
    assert len(fb) == 0
    assert fb.factor(1_000.0) == pytest.approx((5.0 + 1.0) / (5.0 + 4.0), rel=1e-4)


def test_with_no_copy_left_the_live_sum_is_exactly_zero() -> None:
    fb = OutcomeFeedback(FeedbackConfig(enabled=True))
    rng = random.Random(3)
    for b in range(1_000):
        fb.watch(b, node=1, expiry_ms=1e9, p=rng.random())
    fb.forget(1, range(1_000))
    assert fb.factor(0.0) == 1.0  # no rounding left over from the running sum


def test_a_copy_is_used_only_when_its_request_is_routed_to_its_node_while_it_lives() -> None:
    fb = OutcomeFeedback(FeedbackConfig(strength=5.0, half_life_ms=HOUR))
    fb.watch(7, node=1, expiry_ms=1_000.0, p=0.5, source=0)
    fb.watch(8, node=1, expiry_ms=1_000.0, p=0.5, source=0)
    fb.watch(9, node=2, expiry_ms=1_000.0, p=0.5, source=0)
    fb.watch(6, node=2, expiry_ms=1_000.0, p=0.5, source=0)
    fb.observe(1, [1, 2, 7], 100.0)  # used
    fb.observe(0, [1, 2, 8], 100.0)  # its request went back to the source: unused
    fb.observe(2, [1, 2, 9], 2_000.0)  # came after the copy expired: unused
    fb.observe(3, [1, 6], 200.0)  # went to a third node: unused
    assert (fb.settled, fb.used, len(fb)) == (4, 1, 0)
    assert fb.fates == {"used": 1, "routed_to_source": 1, "expired": 1, "routed_elsewhere": 1}
    fb.watch(5, node=2, expiry_ms=1_000.0, p=0.5, source=0)
    fb.observe(2, [5], 100.0)
    assert (fb.settled, fb.used) == (5, 2)
    assert fb.factor(2_000.0) == pytest.approx((5.0 + 2.0) / (5.0 + 2.5), rel=1e-4)  # ~no decay


def test_only_the_first_request_settles_a_copy() -> None:
    fb = OutcomeFeedback(FeedbackConfig())
    fb.watch(7, node=1, expiry_ms=1_000.0, p=1.0)
    fb.observe(0, [7], 10.0)
    fb.observe(1, [7], 20.0)  # the copy was already judged unused
    assert (fb.settled, fb.used) == (1, 0)


def test_a_copy_that_expires_before_its_request_counts_unused() -> None:
    fb = OutcomeFeedback(FeedbackConfig(strength=1.0, half_life_ms=HOUR))
    fb.watch(7, node=1, expiry_ms=1_000.0, p=1.0)
    fb.expire(999.0)
    assert len(fb) == 1
    fb.expire(1_001.0)
    assert (fb.settled, fb.used, len(fb)) == (1, 0, 0)
    assert fb.factor(1_001.0) == pytest.approx(0.5, rel=1e-6)


def test_outcomes_fade_so_the_factor_returns_to_one() -> None:
    fb = OutcomeFeedback(FeedbackConfig(strength=1.0, half_life_ms=1_000.0))
    for b in range(9):
        fb.watch(b, node=1, expiry_ms=0.0, p=1.0)
    fb.expire(1.0)
    low = fb.factor(1.0)
    assert low == pytest.approx(0.1, rel=1e-3)
    assert fb.factor(1_001.0) == pytest.approx(1.0 / (1.0 + 4.5), rel=1e-3)  # half the weight
    assert fb.factor(60_000.0) == pytest.approx(1.0, abs=1e-9)


def test_disabled_feedback_leaves_p_alone() -> None:
    fb = OutcomeFeedback(FeedbackConfig(enabled=False))
    fb.watch(7, node=1, expiry_ms=0.0, p=1.0)
    fb.expire(1.0)
    assert fb.settled == 1 and fb.factor(1.0) == 1.0


def replications(cmds: list) -> list[ReplicateCommand]:
    return [c for c in cmds if isinstance(c, ReplicateCommand)]


def test_the_decider_scales_p_hit_by_its_copies_outcomes_and_stops_when_unused() -> None:
    fresh = replications(Decider().decide(*one_chain(0.9), view()))[0]
    taught = Decider(decider_cfg(feedback={"strength": 1.0, "half_life_ms": HOUR}))
    for b in range(100, 103):  # three earlier copies at P = 1, all routed elsewhere
        taught.feedback.watch(b, node=1, expiry_ms=10.0, p=1.0)
        taught.observe_arrival(2, [b], 5.0)
    cmd = replications(taught.decide(*one_chain(0.9), view(now_ms=10.0)))[0]
    assert cmd.reason.p_hit == pytest.approx(fresh.reason.p_hit / 4.0)
    # the copy just made is watched with the P it would have had uncorrected
    assert next(iter(taught.feedback.watched(CHAIN[-1]).values())).p == pytest.approx(
        fresh.reason.p_hit
    )
    for b in range(200, 240):  # many more unused: P x saved no longer pays
        taught.feedback.watch(b, node=1, expiry_ms=20.0, p=1.0)
        taught.observe_arrival(2, [b], 15.0)
    assert replications(taught.decide(*one_chain(0.9, (50, *CHAIN[1:])), view(now_ms=20.0))) == []


def test_used_copies_keep_the_decider_copying() -> None:
    cfg = decider_cfg(feedback={"strength": 1.0, "half_life_ms": HOUR})
    d = Decider(cfg)
    for b in range(100, 140):  # every copy used where it was made
        d.feedback.watch(b, node=1, expiry_ms=10.0, p=1.0)
        d.observe_arrival(1, [b], 5.0)
    assert d.feedback.factor(10.0) == pytest.approx(1.0)
    assert len(replications(d.decide(*one_chain(0.9), view(now_ms=10.0)))) == 1


def test_a_copy_is_watched_with_its_uncorrected_p_even_when_the_correction_clips() -> None:
    cfg = decider_cfg(feedback={"strength": 1.0, "half_life_ms": HOUR})
    fresh = replications(Decider(cfg).decide(*one_chain(0.9), view()))[0]
    d = Decider(cfg)
    for b in range(100, 110):  # ten copies made at P = 0.1, all used: factor (1+10)/(1+1)
        d.feedback.watch(b, node=1, expiry_ms=10.0, p=0.1)
        d.observe_arrival(1, [b], 5.0)
    assert d.feedback.factor(10.0) == pytest.approx(5.5)
    cmd = replications(d.decide(*one_chain(0.9), view(now_ms=10.0)))[0]
    assert cmd.reason.p_hit == pytest.approx(1.0)  # 0.9 x 5.5, clipped
    # watched with the P the scorer gave (not 1 / 5.5), so the factor stays a fair ratio
    (watched,) = d.feedback.watched(CHAIN[-1]).values()
    assert watched.p == pytest.approx(fresh.reason.p_hit)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_looking_only_at_the_watched_depths_settles_what_a_full_pass_settles(data) -> None:
    """Prefix-chained requests (a block id names its whole prefix): the positional lookup and
    a pass over every block settle the same copies with the same fates."""
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    chains: list[list[int]] = [[]]
    for _ in range(40):  # a random prefix tree: extend some earlier chain by fresh blocks
        base = rng.choice(chains)
        chains.append(base[: rng.randint(0, len(base))] + [rng.getrandbits(40) for _ in
                                                          range(rng.randint(1, 6))])  # fmt: skip
    positional = OutcomeFeedback(FeedbackConfig(half_life_ms=HOUR))
    full_pass = OutcomeFeedback(FeedbackConfig(half_life_ms=HOUR))
    now = 0.0
    for _ in range(120):
        now += rng.uniform(0.0, 50.0)
        chain = rng.choice(chains[1:])
        if rng.random() < 0.4:  # a copy of a prefix of it
            depth = rng.randrange(len(chain))
            args = (chain[depth], rng.randrange(4), now + rng.uniform(0, 500), rng.random(), 0)
            positional.watch(*args, depth=depth)
            full_pass.watch(*args)  # depth unknown: every block of each request is looked up
        else:
            node = rng.randrange(4)
            positional.observe(node, chain, now)
            full_pass.observe(node, chain, now)
        if rng.random() < 0.1:
            positional.expire(now)
            full_pass.expire(now)
    assert positional.fates == full_pass.fates and len(positional) == len(full_pass)
    assert positional.factor(now) == full_pass.factor(now)


def test_two_copies_of_one_chain_are_each_settled() -> None:
    fb = OutcomeFeedback(FeedbackConfig())
    fb.watch(22, node=7, expiry_ms=1_000.0, p=0.5, source=4, depth=1)
    fb.watch(22, node=5, expiry_ms=1_000.0, p=0.5, source=4, depth=1)
    assert len(fb) == 2 and set(fb.watched(22)) == {5, 7}
    fb.observe(7, [21, 22], now_ms=500.0)
    assert fb.fates == {"used": 1, "routed_elsewhere": 1} and len(fb) == 0


def test_a_copy_expires_at_its_expiry_instant_as_the_ledger_evicts_it() -> None:
    from kvcast.predictor.budgets import BudgetLedger, Transfer
    from kvcast.predictor.decider_config import BudgetConfig

    ledger = BudgetLedger(BudgetConfig())
    fb = OutcomeFeedback(FeedbackConfig())
    ledger.record(Transfer(0.0, 10.0, 0, 1, 1, (5,)), 30_000.0)
    fb.watch(5, node=1, expiry_ms=30_000.0, p=0.5, source=0, depth=0)
    ledger.settle(30_000.0)
    fb.expire(30_000.0)
    assert ledger.expired(30_000.0) == {1: [5]}
    assert fb.fates == {"expired": 1} and len(fb) == 0


@pytest.mark.parametrize("seed", range(20))
def test_expire_settles_exactly_the_copies_past_their_life_at_every_instant(seed: int) -> None:
    """Whatever the order of copies, replaced copies and copies reported gone, each call
    settles every watched copy whose life has ended, and no other (the feedback skips its
    pass over the watches while nothing is due)."""
    rng = random.Random(seed)
    fb = OutcomeFeedback(FeedbackConfig())
    live: dict[tuple[int, int], float] = {}  # (block, node) -> expiry: the reference
    now = 0.0
    for _ in range(300):
        now += rng.choice([0.0, rng.uniform(0.0, 40.0)])
        block, node, op = rng.randrange(12), rng.randrange(3), rng.random()
        if op < 0.5:  # a copy (a copy of the same chain to the same node replaces it)
            expiry = now + rng.uniform(0.0, 200.0)
            fb.watch(block, node, expiry, p=0.5, source=9, depth=0)
            live[(block, node)] = expiry
        elif op < 0.6:  # reported gone before its life ended: not settled
            fb.forget(node, [block])
            live.pop((block, node), None)
        else:
            settled = fb.fates["expired"]
            due = [key for key, exp in live.items() if exp <= now]
            fb.expire(now)
            assert fb.fates["expired"] - settled == len(due), f"at {now}"
            for key in due:
                del live[key]
            assert len(fb) == len(live)
            for (b, n), exp in live.items():
                assert fb.watched(b)[n].expiry_ms == exp
