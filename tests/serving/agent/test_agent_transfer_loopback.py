"""Agent-to-agent pulls over real loopback sockets: bytes, checksums, deadlines, retries,
idempotent commands and token refusal. Faults are injected by test servers that write bad
bytes (or nothing) on a real socket."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from kvcast.serving.agent import (
    Agent,
    BlockState,
    PullStatus,
    StoredBlock,
    TransferServer,
)
from kvcast.serving.messages import BlockHash, BlockHeader, encode

KiB = 1024


def soon(seconds: float = 3.0) -> float:
    return time.monotonic() + seconds


class CorruptingServer(TransferServer):
    """Flips one byte of the listed blocks' payloads (the header keeps the true checksum)."""

    corrupt: frozenset[BlockHash] = frozenset()

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        if block_hash not in self.corrupt:
            return await super().send_block(writer, tenant, block_hash, block)
        data = np.array(block.buffer.view(), dtype=np.uint8)
        data[len(data) // 2] ^= 0xFF
        writer.write(encode(BlockHeader(block_hash, tenant, len(data), block.checksum)))
        writer.write(data.tobytes())
        await writer.drain()


class StallingServer(TransferServer):
    """Sends half of the listed blocks' payloads, then stalls."""

    stall: frozenset[BlockHash] = frozenset()

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        if block_hash not in self.stall:
            return await super().send_block(writer, tenant, block_hash, block)
        view = block.buffer.view()
        writer.write(encode(BlockHeader(block_hash, tenant, len(view), block.checksum)))
        writer.write(view[: len(view) // 2])
        await writer.drain()
        await asyncio.sleep(30)


class DroppingServer(TransferServer):
    """Closes the connection half-way through the first pull it serves, then behaves."""

    drops_left = 1

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        if self.drops_left > 0:
            self.drops_left -= 1
            view = block.buffer.view()
            writer.write(encode(BlockHeader(block_hash, tenant, len(view), block.checksum)))
            writer.write(view[:100])
            await writer.drain()
            raise ConnectionResetError("injected drop")
        await super().send_block(writer, tenant, block_hash, block)


class RelabellingServer(TransferServer):
    """Answers every pull with blocks labelled as another tenant's."""

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        await super().send_block(writer, "someone-else", block_hash, block)


class BrokenServer(TransferServer):
    """Fails with an unexpected error while serving."""

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        raise RuntimeError("disk on fire")


def held_bytes(agent: Agent, tenant: str, h: BlockHash) -> bytes | None:
    block = agent.store.peek(tenant, h)
    return None if block is None else bytes(block.buffer.view())


def test_pulled_blocks_are_byte_identical_to_the_source(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            sizes = {1: 1, 2: 64 * KiB, 3: 300 * KiB, 4: 4096 * KiB + 7, 5: 0}
            source = fill_agent(src, "t", sizes)
            result = await dst.pull(src.address, list(sizes), "t", soon(), ttl_s=60.0)
            assert result.status is PullStatus.OK and result.attempts == 1
            assert sorted(result.committed) == sorted(sizes)
            assert result.bytes_committed == sum(sizes.values())
            for h in sizes:
                assert held_bytes(dst, "t", h) == source[h]
                info = dst.store.info("t", h)
                assert info.state is BlockState.SPECULATIVE and info.expires_at > time.monotonic()
            assert src.server.stats.blocks_sent == len(sizes)

    run(scenario())


def test_corrupted_block_is_refused_by_checksum_and_never_visible(run, config, fill_agent) -> None:
    async def scenario() -> None:
        src_agent = Agent(config())
        src_agent.server = CorruptingServer(src_agent.store)
        src_agent.server.corrupt = frozenset({2})
        async with src_agent as src, Agent(config(max_retries=1)) as dst:
            source = fill_agent(src, "t", {1: 64 * KiB, 2: 64 * KiB})
            result = await dst.pull(src.address, [1, 2], "t", soon())
            assert result.status is PullStatus.PARTIAL
            assert result.committed == (1,) and held_bytes(dst, "t", 1) == source[1]
            assert result.corrupt == (2,) and result.incomplete == (2,)
            assert dst.store.info("t", 2) is None
            assert result.attempts == 2  # the corrupted block was retried once
            assert dst.client.stats.checksum_failures == 2
            assert dst.store.stats.rejected_checksum == 2

    run(scenario())


def test_transfer_past_its_deadline_is_cancelled_and_reported(run, config, fill_agent) -> None:
    async def scenario() -> None:
        src_agent = Agent(config())
        src_agent.server = StallingServer(src_agent.store)
        src_agent.server.stall = frozenset({2})
        async with src_agent as src, Agent(config()) as dst:
            source = fill_agent(src, "t", {1: 64 * KiB, 2: 1024 * KiB})
            started = time.monotonic()
            result = await dst.pull(src.address, [1, 2], "t", soon(0.3))
            assert time.monotonic() - started < 1.5
            assert result.status is PullStatus.DEADLINE_EXCEEDED
            assert result.committed == (1,) and held_bytes(dst, "t", 1) == source[1]
            assert result.incomplete == (2,) and dst.store.info("t", 2) is None
            assert dst.client.stats.deadline_exceeded == 1

    run(scenario())


def test_a_deadline_already_passed_moves_nothing(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: KiB})
            result = await dst.pull(src.address, [1], "t", time.monotonic() - 1)
            assert result.status is PullStatus.DEADLINE_EXCEEDED and len(dst.store) == 0

    run(scenario())


def test_same_command_id_twice_moves_the_data_once(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: 256 * KiB, 2: 256 * KiB})
            first = await dst.pull(src.address, [1, 2], "t", soon(), command_id="cmd-1")
            dst.store.evict("t", 1)  # even then, a repeated command moves nothing
            again = await dst.pull(src.address, [1, 2], "t", soon(), command_id="cmd-1")
            assert again is first and first.ok
            assert src.server.stats.pulls_served == 1
            assert src.server.stats.bytes_sent == 512 * KiB
            both = await asyncio.gather(
                dst.pull(src.address, [1], "t", soon(), command_id="cmd-2"),
                dst.pull(src.address, [1], "t", soon(), command_id="cmd-2"),
            )
            assert both[0] is both[1] and both[0].committed == (1,)
            assert src.server.stats.pulls_served == 2
            assert dst.client.commands.duplicates == 2

    run(scenario())


def test_blocks_already_held_are_not_moved_again(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: KiB, 2: KiB})
            await dst.pull(src.address, [1], "t", soon())
            result = await dst.pull(src.address, [1, 2], "t", soon())
            assert result.ok and result.already_present == (1,) and result.committed == (2,)
            assert src.server.stats.blocks_sent == 2

    run(scenario())


def test_pull_without_the_right_token_is_refused(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with (
            Agent(config(token="s3cret")) as src,
            Agent(config(token="wrong")) as bad,
            Agent(config()) as anonymous,
            Agent(config(token="s3cret")) as good,
        ):
            fill_agent(src, "t", {1: KiB})
            for puller in (bad, anonymous):
                result = await puller.pull(src.address, [1], "t", soon())
                assert result.status is PullStatus.REFUSED and result.attempts == 1
                assert "UNAUTHORIZED" in result.error and len(puller.store) == 0
            assert src.server.stats.auth_refused == 2 and src.server.stats.blocks_sent == 0
            assert (await good.pull(src.address, [1], "t", soon())).ok

    run(scenario())


def test_dropped_connection_is_retried_with_back_off(run, config, fill_agent) -> None:
    async def scenario() -> None:
        src_agent = Agent(config())
        src_agent.server = DroppingServer(src_agent.store)
        async with src_agent as src, Agent(config()) as dst:
            source = fill_agent(src, "t", {1: 128 * KiB, 2: 128 * KiB})
            result = await dst.pull(src.address, [1, 2], "t", soon())
            assert result.ok and result.attempts == 2 and dst.client.stats.retries == 1
            assert all(held_bytes(dst, "t", h) == source[h] for h in (1, 2))

    run(scenario())


def test_unreachable_peer_fails_after_bounded_retries(run, config) -> None:
    async def scenario() -> None:
        async with Agent(config(max_retries=2)) as dst:
            port = int(dst.address.rpartition(":")[2])
        async with Agent(config(max_retries=2)) as dst:
            result = await dst.pull(f"127.0.0.1:{port}", [1], "t", soon())
            assert result.status is PullStatus.FAILED and result.attempts == 3
            assert "cannot connect" in result.error

    run(scenario())


def test_a_block_of_another_tenant_is_never_served_or_stored(run, config, fill_agent) -> None:
    async def scenario() -> None:
        liar = Agent(config(max_retries=0))
        liar.server = RelabellingServer(liar.store)
        async with Agent(config()) as src, liar, Agent(config(max_retries=0)) as dst:
            fill_agent(src, "alice", {7: KiB})
            result = await dst.pull(src.address, [7], "bob", soon())
            assert result.missing == (7,) and result.status is PullStatus.FAILED
            fill_agent(liar, "bob", {7: KiB})
            result = await dst.pull(liar.address, [7], "bob", soon())
            assert result.status is PullStatus.FAILED and "unrequested" in result.error
            assert len(dst.store) == 0

    run(scenario())


def test_replicas_beyond_the_quota_are_rejected_not_stored(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with (
            Agent(config()) as src,
            Agent(config(capacity_bytes=1 << 20, speculative_quota_bytes=100 * KiB)) as dst,
        ):
            fill_agent(src, "t", {1: 64 * KiB, 2: 200 * KiB})
            result = await dst.pull(src.address, [1, 2], "t", soon())
            assert result.status is PullStatus.PARTIAL and result.rejected == (2,)
            assert dst.store.speculative_bytes <= 100 * KiB

    run(scenario())


def test_pull_as_cached_commits_cached_blocks(run, config, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, Agent(config()) as dst:
            fill_agent(src, "t", {1: KiB})
            result = await dst.pull(src.address, [1], "t", soon(), state=BlockState.CACHED)
            assert result.ok and dst.store.info("t", 1).state is BlockState.CACHED

    run(scenario())


def test_a_failing_source_reports_an_internal_error_and_keeps_serving(
    run, config, fill_agent
) -> None:
    async def scenario() -> None:
        broken = Agent(config())
        broken.server = BrokenServer(broken.store)
        async with broken, Agent(config(max_retries=1)) as dst:
            fill_agent(broken, "t", {1: KiB})
            result = await dst.pull(broken.address, [1], "t", soon())
            assert result.status is PullStatus.FAILED and "INTERNAL" in result.error
            assert result.attempts == 2 and broken.server.stats.internal_errors == 2
            assert len(dst.store) == 0

    run(scenario())
