"""A replica that a request routed to its node claims is held for that request: the decider
orders no eviction of it at its TTL; it still counts as its chain's live copy until then."""

from __future__ import annotations

import random

import pytest
from decider_views import BLOCK, CHAIN, decider_cfg, one_chain, view

from kvcast.predictor.budgets import BudgetLedger, Transfer
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import EvictCommand, ReplicateCommand
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import BudgetConfig

EMPTY = ChainCandidates.build([])


def reps(cmds: list) -> list[ReplicateCommand]:
    return [c for c in cmds if isinstance(c, ReplicateCommand)]


def test_the_decider_orders_no_eviction_of_a_replica_a_routed_request_claimed() -> None:
    d = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}))
    cmd = reps(d.decide(*one_chain(0.9), view()))[0]
    d.observe_arrival(cmd.target, CHAIN, 2_000.0)  # landed by then; the request waits
    out = d.decide(EMPTY, [], view(now_ms=10_000.0))
    assert [c for c in out if isinstance(c, EvictCommand)] == []
    assert d.feedback.fates["used"] == 1  # and the copy still counts as used


def test_only_the_node_a_request_is_routed_to_hands_its_replicas_over() -> None:
    ledger = BudgetLedger(BudgetConfig())
    for node in (1, 2):
        ledger.record(Transfer(0.0, 10.0, 0, node, 10 * BLOCK, CHAIN), expiry_ms=1_000.0)
    assert ledger.claim(1, CHAIN, 100.0) == 10
    assert ledger.claim(1, CHAIN, 100.0) == 0  # a second request: nothing left to hand over
    assert ledger.expired(1_000.0) == {2: list(CHAIN)}  # node 2's copies: evicted at TTL


def test_a_replica_still_on_its_way_is_not_claimed() -> None:
    ledger = BudgetLedger(BudgetConfig())
    ledger.record(Transfer(0.0, 500.0, 0, 1, 10 * BLOCK, CHAIN), expiry_ms=1_000.0)
    assert ledger.claim(1, CHAIN, 100.0) == 0  # the router could not count it yet
    assert ledger.has_replica(CHAIN[-1])
    assert ledger.claim(1, CHAIN, 600.0) == 10  # landed (the ledger not settled since)
    assert ledger.expired(1_000.0) == {}


def test_with_claim_in_flight_a_replica_on_its_way_is_claimed_and_never_evicted() -> None:
    ledger = BudgetLedger(BudgetConfig())
    ledger.record(Transfer(0.0, 500.0, 0, 1, 10 * BLOCK, CHAIN), expiry_ms=1_000.0)
    assert ledger.claim(1, CHAIN, 100.0, in_flight=True) == 10  # the live sidecar's rule
    assert ledger.has_replica(CHAIN[-1])
    assert ledger.expired(1_000.0) == {}  # no eviction ordered for it at its TTL
    d = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}), claim_in_flight=True)
    cmd = reps(d.decide(*one_chain(0.9), view()))[0]
    d.observe_arrival(cmd.target, CHAIN, 0.0)  # routed as the copy starts: still on its way
    out = d.decide(EMPTY, [], view(now_ms=10_000.0))
    assert [c for c in out if isinstance(c, EvictCommand)] == []
    plain = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}))  # the simulator's rule
    cmd = reps(plain.decide(*one_chain(0.9), view()))[0]
    plain.observe_arrival(cmd.target, CHAIN, 0.0)
    evicted = [
        c for c in plain.decide(EMPTY, [], view(now_ms=10_000.0)) if isinstance(c, EvictCommand)
    ]
    assert evicted, "without claim_in_flight the copy on its way is not claimed"


def test_a_claimed_replica_counts_as_its_chains_copy_until_its_ttl_then_quietly_goes() -> None:
    ledger = BudgetLedger(BudgetConfig())
    ledger.record(Transfer(0.0, 10.0, 0, 1, BLOCK, (7,)), expiry_ms=1_000.0)
    assert ledger.claim(1, [5, 7, 9], 100.0) == 1
    assert ledger.has_replica(7)  # the copy was made and is being used: one is enough
    assert ledger.expired(999.0) == {} and ledger.has_replica(7)
    assert ledger.expired(1_000.0) == {}  # no eviction ordered ...
    assert not ledger.has_replica(7)  # ... and forgotten at its TTL


def test_a_chain_whose_claimed_copy_passed_its_ttl_may_be_copied_again() -> None:
    d = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}))
    first = reps(d.decide(*one_chain(0.9), view()))
    assert len(first) == 1
    target = first[0].target
    landed = {b: 0b001 | (1 << target) for b in CHAIN}
    busy = tuple(0.0 if n not in (0, target) else 2000.0 for n in range(3))
    d.observe_arrival(target, CHAIN, 1_500.0)  # the copy is that request's now
    assert reps(d.decide(*one_chain(0.9), view(queue=busy, holders=landed, now_ms=2_000.0))) == []
    later = d.decide(*one_chain(0.9), view(queue=busy, holders=landed, now_ms=10_000.0))
    assert [c for c in later if isinstance(c, EvictCommand)] == []
    again = reps(later)
    assert len(again) == 1 and again[0].target not in (0, target)


@pytest.mark.parametrize("seed", range(20))
def test_expired_and_has_replica_leave_out_exactly_the_claimed_replicas(seed: int) -> None:
    """Copies, renewed copies, copies reported gone and requests claiming them, in any
    order: ``expired`` returns every unclaimed live replica past its TTL and no other, and
    ``has_replica`` says whether some replica of the block is within its TTL, claimed or
    not."""
    rng = random.Random(seed)
    ledger = BudgetLedger(BudgetConfig())
    live: dict[tuple[int, int], float] = {}  # (node, block) -> expiry
    claimed: dict[tuple[int, int], float] = {}  # the same, claimed
    flights: list[tuple[int, tuple[int, ...], float]] = []  # (node, blocks, landing)
    now = 0.0
    for _ in range(300):
        now += rng.choice([0.0, rng.uniform(0.0, 40.0)])
        op = rng.random()
        if op < 0.4:
            node, blocks = rng.randrange(3), tuple(rng.sample(range(12), rng.randint(1, 3)))
            landed, expiry = now + rng.uniform(0.0, 20.0), now + rng.uniform(0.0, 200.0)
            ledger.record(Transfer(now, landed, 9, node, 1, blocks), expiry)
            live |= {(node, b): expiry for b in blocks}
            for b in blocks:  # a claimed replica copied anew is a replica again
                claimed.pop((node, b), None)
            flights.append((node, blocks, landed))
        elif op < 0.5:
            node, blocks = rng.randrange(3), rng.sample(range(12), 2)
            ledger.forget(node, blocks)
            for b in blocks:
                live.pop((node, b), None)
                claimed.pop((node, b), None)
        elif op < 0.7:  # a request routed to ``node`` claims what landed there
            node, blocks = rng.randrange(3), rng.sample(range(12), rng.randint(1, 6))
            mine = [(node, b) for b in blocks if (node, b) in live]
            # a block copied twice to a node is on its way while either transfer flies
            flying = {(n, b) for n, bs, landed in flights if landed > now for b in bs}
            mine = [k for k in mine if k not in flying]
            assert ledger.claim(node, blocks, now) == len(mine)
            for k in mine:
                claimed[k] = live.pop(k)
        else:
            due = sorted(key for key, exp in live.items() if exp <= now)
            got = sorted((n, b) for n, bs in ledger.expired(now).items() for b in bs)
            assert got == due, f"at {now}"
            for key in due:
                del live[key]
            for key in [k for k, exp in claimed.items() if exp <= now]:
                del claimed[key]
        for b in range(12):
            assert ledger.has_replica(b) == any(k[1] == b for k in [*live, *claimed])


def test_observe_arrivals_settles_a_batch_as_one_call_per_request_does() -> None:
    made = []
    for batched in (False, True):
        d = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}))
        cmd = reps(d.decide(*one_chain(0.9), view()))[0]
        other = (cmd.target + 1) % view().n
        routed = [(2_000.0, other, CHAIN), (2_500.0, cmd.target, CHAIN)]
        if batched:
            d.observe_arrivals(routed)
        else:
            for ts, node, blocks in routed:
                d.observe_arrival(node, blocks, ts)
        made.append((dict(d.feedback.fates), dict(d.ledger.claimed), d.ledger.unclaimed))
    assert made[0] == made[1]
    assert made[0][0] == {"routed_elsewhere": 1} and made[0][1]  # settled, then claimed


def test_observe_arrivals_claims_a_replica_no_copy_outcome_is_awaited_for() -> None:
    d = Decider(decider_cfg())
    d.ledger.record(Transfer(0.0, 10.0, 0, 1, 10 * BLOCK, CHAIN), expiry_ms=1_000.0)
    assert d.ledger.unclaimed and not d.feedback.watching
    d.observe_arrivals([(100.0, 1, CHAIN)])
    assert len(d.ledger.claimed) == 10 and not d.ledger.unclaimed
