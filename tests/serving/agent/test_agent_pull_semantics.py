"""What a pull means for blocks the node already holds, and how two commands on one block are
counted; the command-id records behind idempotency (real agents on loopback)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from kvcast.serving.agent import Agent, AgentConfig, BlockState
from kvcast.serving.agent.api_models import BlockRefs, ReplicateRequest
from kvcast.serving.agent.control import AgentControl, CommandConflict


def test_a_cached_pull_of_a_held_replica_makes_it_cached(
    config: Callable[..., AgentConfig], fill_agent: Any, run: Any
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: 1024})
            assert (await dst.pull(src.address, [1], "t", time.monotonic() + 3)).ok
            assert dst.store.info("t", 1).state is BlockState.SPECULATIVE
            again = await dst.pull(src.address, [1], "t", time.monotonic() + 3,
                                   state=BlockState.CACHED)  # fmt: skip
            assert again.ok and again.already_present == (1,) and again.committed == ()
            info = dst.store.info("t", 1)
            assert info.state is BlockState.CACHED and info.expires_at is None

    run(scenario())


def test_a_speculative_pull_of_a_held_replica_renews_its_ttl(
    config: Callable[..., AgentConfig], fill_agent: Any, run: Any
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: 1024})
            await dst.pull(src.address, [1], "t", time.monotonic() + 3, ttl_s=1.0)
            first = dst.store.info("t", 1).expires_at
            await dst.pull(src.address, [1], "t", time.monotonic() + 3, ttl_s=60.0)
            assert dst.store.info("t", 1).expires_at > first + 50.0

    run(scenario())


def test_two_commands_pulling_one_block_at_once_count_it_once(
    config: Callable[..., AgentConfig], fill_agent: Any, run: Any
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {7: 300 << 10})
            a, b = await asyncio.gather(
                dst.pull(src.address, [7], "t", time.monotonic() + 3, command_id="a"),
                dst.pull(src.address, [7], "t", time.monotonic() + 3, command_id="b"),
            )
            assert a.ok and b.ok and len(dst.store) == 1
            assert len(a.committed) + len(b.committed) == 1  # stored by one of them
            assert (*a.already_present, *b.already_present) == (7,)
            stats = dst.client.stats
            assert (stats.blocks_committed, stats.bytes_committed) == (1, 300 << 10)
            assert stats.bytes_already_held == 300 << 10  # both moved it: the wire says so

    run(scenario())


def test_a_replicate_id_stays_bound_to_its_blocks_however_many_other_commands_follow(
    config: Callable[..., AgentConfig], fill_agent: Any, run: Any
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: 1024, 2: 1024})
            control = AgentControl(dst)
            first = ReplicateRequest(command_id="X", source=src.address, tenant="t",
                                     block_hashes=[1], deadline_s=3)  # fmt: skip
            assert (await control.replicate(first)).committed == [1]
            for i in range(2 * control._commands.capacity + 1):  # pins: another log's ids
                await control.pin(BlockRefs(command_id=f"p{i}", tenant="t", block_hashes=[9]))
            assert "X" in dst.client.commands  # its outcome is still kept ...
            with pytest.raises(CommandConflict):  # ... so its meaning is too
                await control.replicate(first.model_copy(update={"block_hashes": [2]}))

    run(scenario(), timeout=60)


def test_an_empty_token_in_a_config_is_refused() -> None:
    from kvcast.config import ConfigError, parse_config
    from kvcast.serving.sidecar.config import SidecarConfig

    with pytest.raises(ValueError, match="token is set but empty"):
        AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=0, token="  ")
    with pytest.raises(ConfigError, match="token is set but empty"):
        parse_config(SidecarConfig, {"nodes": [{"name": "a"}], "token": ""})
