"""The simulator's block pool under generated schedules (hypothesis, thousands of steps).

Requests pin, add and release blocks; replicas land with TTLs and holds; time moves on. After
every step: no active block has left HBM, speculative blocks never exceed the quota, HBM never
exceeds its capacity, every replica past its TTL is gone once the pool expires, and the
cluster-wide ``holders`` index says exactly which blocks are in HBM.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvcast.simulator.block_pool import BlockPool

BLOCKS = st.integers(min_value=0, max_value=40)


class PoolSchedule(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.holders: dict[int, int] = {}
        self.pool = BlockPool(3, 12, self.holders, spec_quota=4)
        self.now = 0.0
        self.requests: list[list[int]] = []  # blocks each live request pinned
        self.transfers: list[list[int]] = []  # blocks each transfer in progress reads

    @rule(blocks=st.lists(BLOCKS, min_size=1, max_size=8, unique=True))
    def request(self, blocks: list[int]) -> None:
        p = self.pool
        resident = [b for b in blocks if p.in_hbm(b)]
        p.pin(resident, self.now)  # pinned first: making room must not evict them
        new = [b for b in blocks if b not in resident]
        if p.make_room(len(new), self.now):
            p.add_active(new)
            self.requests.append(blocks)
        else:
            p.release(resident)

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(min_value=0, max_value=100))
    def finish(self, i: int) -> None:
        self.pool.release(self.requests.pop(i % len(self.requests)))

    @rule(
        blocks=st.lists(BLOCKS, min_size=1, max_size=6, unique=True),
        ttl=st.floats(min_value=1.0, max_value=500.0),
        hold=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1000.0)),
    )
    def replicate(self, blocks: list[int], ttl: float, hold: float | None) -> None:
        active_before = dict(self.pool.active)
        until = None if hold is None else self.now + hold
        self.pool.add_speculative(blocks, self.now, ttl, until)
        assert self.pool.active == active_before  # a replica never touches an active block

    @rule(blocks=st.lists(BLOCKS, min_size=1, max_size=6, unique=True))
    def start_transfer(self, blocks: list[int]) -> None:
        p = self.pool
        resident = [b for b in blocks if p.in_hbm(b)]
        spec_before = {b: p.spec[b] for b in resident if b in p.spec}
        hits = p.spec_hits
        p.pin_source(resident)
        assert {b: p.spec[b] for b in spec_before} == spec_before  # read, not used
        assert p.spec_hits == hits
        self.transfers.append(resident)

    @precondition(lambda self: self.transfers)
    @rule(i=st.integers(min_value=0, max_value=100))
    def end_transfer(self, i: int) -> None:
        self.pool.release_source(self.transfers.pop(i % len(self.transfers)))

    @rule(blocks=st.lists(BLOCKS, max_size=4))
    def evict_replicas(self, blocks: list[int]) -> None:
        self.pool.drop_speculative(blocks)

    @rule(dt=st.floats(min_value=0.0, max_value=300.0))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.pool.expire(self.now)
        sourcing = self.pool.sourcing  # a replica being read outlives its TTL until the read ends
        assert all(exp > self.now or b in sourcing for b, (_, exp, _) in self.pool.spec.items())

    @invariant()
    def active_blocks_stay(self) -> None:
        live = {b for blocks in self.requests for b in blocks}
        assert live <= set(self.pool.active)
        read = {b for blocks in self.transfers for b in blocks}
        assert all(self.pool.in_hbm(b) for b in read)  # what a transfer reads stays
        assert self.pool.spec_active_evictions == 0

    @invariant()
    def within_quota_and_capacity(self) -> None:
        p = self.pool
        assert len(p.spec) <= p.spec_quota
        assert p.used <= p.capacity
        assert not (set(p.spec) & set(p.cached)) and not (set(p.spec) & set(p.active))

    @invariant()
    def holders_index_is_exact(self) -> None:
        p = self.pool
        in_hbm = set(p.active) | set(p.cached) | set(p.spec)
        assert {b for b, mask in self.holders.items() if mask & p.bit} == in_hbm


TestPoolSchedule = PoolSchedule.TestCase
TestPoolSchedule.settings = settings(max_examples=1000, stateful_step_count=40, deadline=None)
