"""Which tenants' arrivals named a block, for a tenant token's lookups: tenants are told apart
by their exact names (two whose crc32, the model's tenant code, is equal stay apart); only
the tenants of some tenant token are kept; at most ``capacity`` blocks, the least recently
named forgotten first, and none older than the horizon; a block's tenants add up."""

from __future__ import annotations

import zlib

import pytest

from kvcast.features.events import RequestArrived
from kvcast.serving.sidecar.block_tenants import BlockTenants

TWINS = ("org-fqb17i228u", "org-hh578ntdii")  # one crc32: one tenant_code in the features


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def named(tenant: str, *hashes: int) -> RequestArrived:
    return RequestArrived(0.0, f"r-{tenant}-{hashes}", 0, tenant, None, 512, 0, hashes)


def test_tenants_whose_names_share_a_crc32_are_told_apart() -> None:
    assert zlib.crc32(TWINS[0].encode()) == zlib.crc32(TWINS[1].encode())
    blocks = BlockTenants(TWINS, capacity=None, horizon_s=60.0)
    blocks.note([named(TWINS[0], 1, 2)])
    assert blocks.named_by(1, [TWINS[0]]) and blocks.named_by(2, TWINS)
    assert not blocks.named_by(1, [TWINS[1]]) and not blocks.named_by(3, [TWINS[0]])


def test_only_the_tenants_of_some_tenant_token_are_kept_and_a_blocks_tenants_add_up() -> None:
    blocks = BlockTenants(["acme", "globex"], capacity=None, horizon_s=60.0)
    blocks.note([named("initech", 1), named("acme", 2), named("globex", 2, 3)])
    assert len(blocks) == 2 and not blocks.named_by(1, ["initech", "acme", "globex"])
    assert blocks.named_by(2, ["acme"]) and blocks.named_by(2, ["globex"])
    assert blocks.named_by(3, ["globex"]) and not blocks.named_by(3, ["acme"])


def test_over_the_cap_the_least_recently_named_block_is_forgotten_first() -> None:
    blocks = BlockTenants(["acme"], capacity=3, horizon_s=60.0)
    blocks.note([named("acme", 1, 2, 3)])
    blocks.note([named("acme", 1)])  # named again: the most recent now
    blocks.note([named("acme", 4)])
    assert [b for b in range(1, 5) if blocks.named_by(b, ["acme"])] == [1, 3, 4]
    assert len(blocks) == 3 and blocks.forgotten == 1
    with pytest.raises(ValueError, match="capacity must be >= 1 or None, got 0"):
        BlockTenants(["acme"], capacity=0, horizon_s=60.0)


def test_a_block_no_arrival_named_within_the_horizon_is_forgotten() -> None:
    clock = Clock()
    blocks = BlockTenants(["acme"], capacity=None, horizon_s=60.0, clock=clock)
    blocks.note([named("acme", 1, 2)])
    clock.now += 30.0
    blocks.note([named("acme", 2)])
    clock.now += 45.0  # 1 unnamed for 75 s, 2 for 45 s
    assert not blocks.named_by(1, ["acme"]) and blocks.named_by(2, ["acme"])
    blocks.note([named("acme", 3)])
    assert len(blocks) == 2 and blocks.forgotten == 1
