"""Block store invariants under generated schedules of puts, reads, pins, evictions and time.

After every step: total bytes <= capacity; speculative bytes <= quota; byte counters (per
state and per tenant) match the inventory; every pinned block is still there, active, with its
bytes; no expired replica is listed; a listed block holds exactly the bytes put under its own
(tenant, hash), so a corrupted put and a same-hash block of another tenant are never what a
read returns.
"""

from __future__ import annotations

import zlib

import hypothesis.strategies as st
import numpy as np
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvcast.serving.agent import BlockState, BlockStore, HostBuffer, StoreError, checksum

UNIT = 256
TENANTS = st.sampled_from(["alice", "bob"])
HASHES = st.integers(0, 5)
STATES = st.sampled_from(list(BlockState))


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def contents(tenant: str, h: int, version: int, units: int) -> bytes:
    seed = zlib.crc32(f"{tenant}/{h}/{version}".encode())
    return np.random.default_rng(seed).integers(0, 256, units * UNIT, dtype=np.uint8).tobytes()


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.store = BlockStore(8 * UNIT, 3 * UNIT, speculative_ttl_s=5.0, clock=self.clock)
        self.expected: dict[tuple[str, int], bytes] = {}  # bytes of each block we know stored
        self.pins: dict[tuple[str, int], int] = {}
        self.version = 0

    @rule(tenant=TENANTS, h=HASHES, units=st.integers(0, 4), state=STATES, corrupt=st.booleans())
    def put(self, tenant: str, h: int, units: int, state: BlockState, corrupt: bool) -> None:
        self.version += 1
        data = contents(tenant, h, self.version, units)
        buf = HostBuffer.from_bytes(data)
        crc = checksum(buf.view()) ^ (1 if corrupt else 0)
        existed = self.store.info(tenant, h) is not None
        try:
            self.store.put(tenant, h, buf, crc, state, ttl_s=None)
        except StoreError:
            assert corrupt or not existed
            return
        assert not corrupt
        if not existed:
            self.expected[(tenant, h)] = data
        if state is BlockState.ACTIVE:
            self.pins[(tenant, h)] = self.pins.get((tenant, h), 0) + 1

    @rule(tenant=TENANTS, h=HASHES)
    def pin(self, tenant: str, h: int) -> None:
        if self.store.info(tenant, h) is not None:
            self.store.pin(tenant, h)
            self.pins[(tenant, h)] = self.pins.get((tenant, h), 0) + 1

    @rule(tenant=TENANTS, h=HASHES)
    def unpin(self, tenant: str, h: int) -> None:
        if self.pins.get((tenant, h), 0) > 0:
            self.store.unpin(tenant, h)
            self.pins[(tenant, h)] -= 1

    @rule(tenant=TENANTS, h=HASHES)
    def evict(self, tenant: str, h: int) -> None:
        if self.pins.get((tenant, h), 0) == 0:
            self.store.evict(tenant, h)

    @rule(tenant=TENANTS, h=HASHES)
    def get(self, tenant: str, h: int) -> None:
        block = self.store.get(tenant, h)
        if block is not None:
            assert block.buffer.tobytes() == self.expected[(tenant, h)]

    @rule(dt=st.floats(0.0, 4.0))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule()
    def sweep(self) -> None:
        self.store.sweep()

    @invariant()
    def budgets_hold(self) -> None:
        s = self.store
        listed = s.inventory()
        assert s.used_bytes <= s.capacity_bytes
        assert s.speculative_bytes <= s.speculative_quota_bytes
        assert s.used_bytes == sum(i.nbytes for i in listed)
        spec = sum(i.nbytes for i in listed if i.state is BlockState.SPECULATIVE)
        assert s.speculative_bytes == spec
        tenants = {i.tenant for i in listed} | {"nobody"}
        for tenant in tenants:  # each tenant's bytes, as the tenant-token caps read them
            held = sum(i.nbytes for i in listed if i.tenant == tenant)
            assert s.tenant_bytes([tenant]) == held
        assert s.tenant_bytes(tenants) == s.used_bytes
        for info in listed:
            if info.state is BlockState.SPECULATIVE:
                assert info.expires_at is not None and info.expires_at > self.clock.now

    @invariant()
    def contents_and_pins_hold(self) -> None:
        for key in list(self.expected):
            block = self.store.peek(*key)
            pins = self.pins.get(key, 0)
            if block is None:
                assert pins == 0, f"pinned block {key} disappeared"
                del self.expected[key]
                continue
            assert block.buffer.tobytes() == self.expected[key]
            info = self.store.info(*key)
            assert (info.state is BlockState.ACTIVE) == (pins > 0) and info.pins == pins


TestBlockStoreInvariantsUnderRandomSchedules = StoreMachine.TestCase
TestBlockStoreInvariantsUnderRandomSchedules.settings = settings(
    max_examples=2000, stateful_step_count=20, deadline=None
)
