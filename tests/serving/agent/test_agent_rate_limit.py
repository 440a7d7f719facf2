"""Per-link bandwidth: the token bucket's arithmetic, and a real pull held to its link rate."""

from __future__ import annotations

import time

import pytest

from kvcast.serving.agent import Agent, TcpTransport
from kvcast.serving.agent.rate_limit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_a_burst_then_charges_the_debt_as_delay() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    assert bucket.consume(500) == 0.0
    assert bucket.consume(250) == pytest.approx(0.25)  # 250 B of debt at 1000 B/s
    clock.now += 0.25
    assert bucket.tokens == pytest.approx(0.0)


def test_bucket_never_saves_more_than_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    clock.now += 100.0
    assert bucket.tokens == 500
    assert bucket.consume(1500) == pytest.approx(1.0)


def test_bucket_rejects_nonpositive_rates() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


def test_links_to_different_peers_have_their_own_bucket() -> None:
    transport = TcpTransport(link_bytes_per_s=1e6)
    assert transport.bucket("a:1") is transport.bucket("a:1")
    assert transport.bucket("a:1") is not transport.bucket("b:1")
    assert TcpTransport().bucket("a:1") is None


def test_pull_over_a_rate_limited_link_takes_at_least_bytes_over_rate(
    run, config, fill_agent
) -> None:
    rate, burst, total = 4 << 20, 256 << 10, 2 << 20  # (2 MiB - 256 KiB) / 4 MiB/s = 0.44 s

    async def scenario() -> float:
        limited = config(link_bytes_per_s=rate, link_burst_bytes=burst)
        async with Agent(config()) as src, Agent(limited) as dst:
            fill_agent(src, "t", {1: total // 2, 2: total // 2})
            started = time.monotonic()
            result = await dst.pull(src.address, [1, 2], "t", time.monotonic() + 5)
            assert result.ok
            return time.monotonic() - started

    elapsed = run(scenario())
    assert elapsed >= (total - burst) / rate * 0.9
    assert elapsed < 3.0
