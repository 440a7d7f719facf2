"""TenantPulls: each tenant token's pulls at once, against its cap."""

from __future__ import annotations

import re

import pytest

from kvcast.serving.agent.tenant_pulls import DEFAULT_TENANT_PULLS, TenantPulls


def test_a_token_is_refused_past_its_cap_and_served_again_once_a_pull_ends() -> None:
    pulls = TenantPulls(2, [1, 3])
    assert pulls.take(0)
    assert not pulls.take(0)  # its one pull at once
    assert all(pulls.take(1) for _ in range(3))  # the other token's caps are its own
    assert not pulls.take(1)
    pulls.give_back(0)
    assert pulls.held(0) == 0 and pulls.take(0)
    assert pulls.held(1) == 3


def test_tokens_default_to_the_default_cap() -> None:
    pulls = TenantPulls(3)
    assert pulls.caps == (DEFAULT_TENANT_PULLS,) * 3
    assert sum(pulls.take(2) for _ in range(DEFAULT_TENANT_PULLS + 1)) == DEFAULT_TENANT_PULLS


@pytest.mark.parametrize("caps", [[1], [1, 0], [2, 2, 2]])
def test_caps_must_be_one_per_token_and_positive(caps: list[int]) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {caps}")):
        TenantPulls(2, caps)
