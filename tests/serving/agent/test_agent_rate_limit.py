"""Per-link bandwidth: a bucket per peer, and a real pull held to its link rate (the bucket's
arithmetic: tests/serving/test_token_bucket.py)."""

from __future__ import annotations

import time

from kvcast.serving.agent import Agent, TcpTransport


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
