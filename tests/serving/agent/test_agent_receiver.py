"""The TCP receive path: checksums computed as the bytes land, small blocks staged and large
ones received in place, whatever the split of the byte stream; a digest that does not match
is refused by the store; large blocks cross loopback (plain and TLS) byte-identical, and a
corrupted large block is never committed."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import numpy as np
import pytest

from kvcast.serving.agent import (
    Agent,
    BlockState,
    BlockStore,
    ChecksumMismatch,
    HostAllocator,
    HostBlockPool,
    PullStatus,
    StoredBlock,
    TransferServer,
    checksum,
)
from kvcast.serving.agent.buffers import BlockBuffer
from kvcast.serving.agent.checksum import RunningChecksum
from kvcast.serving.agent.tcp_receiver import PullProtocol
from kvcast.serving.agent.transport import TransportError
from kvcast.serving.messages import BlockHeader, Done, encode

KiB, MiB = 1 << 10, 1 << 20


def _bytes(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_running_checksum_equals_the_one_shot_checksum_for_any_split() -> None:
    rng = random.Random(1)
    for n in (0, 1, 63, 64 * KiB + 5, 3 * MiB + 1):
        data = memoryview(_bytes(n, n))
        running, at = RunningChecksum(), 0
        while at < n:
            step = rng.choice((0, 1, 17, 4 * KiB, 300 * KiB))
            running.update(data[at : at + step])
            at += step
        assert running.value() == checksum(data)


def test_store_compares_a_given_digest_and_refuses_a_wrong_one(monkeypatch) -> None:
    store = BlockStore(MiB, MiB)
    buf = HostAllocator().allocate(4 * KiB)
    buf.view()[:] = _bytes(3, 4 * KiB)
    good = checksum(buf.view())
    with pytest.raises(ChecksumMismatch):
        store.put("t", 1, buf, good, digest=good ^ 1)
    with pytest.raises(ChecksumMismatch):
        store.put("t", 1, buf, good ^ 1, digest=good)
    assert store.info("t", 1) is None and store.stats.rejected_checksum == 2

    def must_not_reread(_: object) -> int:
        raise AssertionError("the store re-read a block whose digest it was given")

    monkeypatch.setattr("kvcast.serving.agent.block_store.compute_checksum", must_not_reread)
    store.put("t", 1, buf, good, digest=good)
    assert store.info("t", 1) is not None


class _FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def _stream(blocks: list[tuple[int, bytes, int]]) -> bytes:
    """Frames of (hash, payload, checksum in the header) blocks, then Done."""
    parts = []
    for h, data, sum_ in blocks:
        parts += [encode(BlockHeader(h, "t", len(data), sum_)), data]
    return b"".join(parts) + encode(Done("c", len(blocks)))


async def _feed(stream: bytes, rng: random.Random, allocator: object) -> tuple[list, PullProtocol]:
    """Drive a PullProtocol with ``stream`` cut into random reads, as the event loop would."""
    got: list[tuple[BlockHeader, bytes, int | None, BlockBuffer]] = []

    def sink(header: BlockHeader, buffer: BlockBuffer, digest: int | None = None) -> None:
        got.append((header, bytes(buffer.view()), digest, buffer))

    proto = PullProtocol(sink, allocator, 64 * MiB)  # type: ignore[arg-type]
    proto.connection_made(_FakeTransport())
    at = 0
    while at < len(stream) and not proto.done.done():
        buf = proto.get_buffer(-1)
        n = min(len(buf), len(stream) - at, rng.choice((1, 7, 100, 5 * KiB, 70 * KiB, 2 * MiB)))
        buf[:n] = stream[at : at + n]
        at += n
        proto.buffer_updated(n)
    return got, proto


@pytest.mark.parametrize("seed", range(12))
def test_every_block_arrives_with_the_digest_of_its_bytes_whatever_the_reads(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [0, 1, 64 * KiB, 256 * KiB, 256 * KiB + 1, 1 * MiB + 3, 3 * MiB]
    rng.shuffle(sizes)
    blocks = [(h, _bytes(seed * 100 + h, n), 0) for h, n in enumerate(sizes)]
    blocks = [(h, d, checksum(d)) for h, d, _ in blocks]
    bad = bytearray(blocks[2][1] or b"\0")  # one corrupted block, small or large
    bad[len(bad) // 2] ^= 0xFF
    blocks[2] = (blocks[2][0], bytes(bad), blocks[2][2] if blocks[2][1] else 12345)
    allocator = HostBlockPool(1 * MiB, 4) if seed % 2 else HostAllocator()

    got, proto = asyncio.run(_feed(_stream(blocks), rng, allocator))
    assert proto.done.done() and proto.done.result().blocks_sent == len(blocks)
    assert [g[0].block_hash for g in got] == [h for h, _, _ in blocks]
    for (header, data, digest, _), (_, sent, header_sum) in zip(got, blocks, strict=True):
        assert data == sent and digest == checksum(data)
        assert (digest == header.checksum) == (header_sum == checksum(sent))
    assert sum(g[2] != g[0].checksum for g in got) == 1


def test_a_stream_that_breaks_off_mid_block_delivers_nothing_of_it() -> None:
    data = _bytes(9, 2 * MiB)
    stream = _stream([(1, data, checksum(data))])[: 1 * MiB]

    async def scenario() -> None:
        got, proto = await _feed(stream, random.Random(0), HostAllocator())
        proto.connection_lost(None)
        assert got == []
        with pytest.raises(TransportError):
            proto.done.result()

    asyncio.run(scenario())


class _CorruptingServer(TransferServer):
    """Sends block 2 with one byte flipped (its header keeps the true checksum)."""

    async def send_block(self, writer, tenant, block_hash, block: StoredBlock) -> None:
        if block_hash != 2:
            return await super().send_block(writer, tenant, block_hash, block)
        data = np.array(block.buffer.view(), dtype=np.uint8)
        data[len(data) - 1] ^= 0xFF
        writer.write(encode(BlockHeader(block_hash, tenant, len(data), block.checksum)))
        writer.write(data.tobytes())
        await writer.drain()


def test_large_blocks_cross_loopback_intact_and_a_corrupted_one_is_refused(
    run, config, fill_agent
) -> None:
    async def scenario() -> None:
        src_agent = Agent(config(max_retries=1))
        src_agent.server = _CorruptingServer(src_agent.store)
        async with src_agent as src, Agent(config(max_retries=1)) as dst:
            sizes = {1: 2 * MiB + 7, 2: 3 * MiB, 3: 1 * MiB, 4: 256 * KiB + 1, 5: 5}
            source = fill_agent(src, "t", sizes)
            result = await dst.pull(src.address, list(sizes), "t", time.monotonic() + 10)
            assert result.status is PullStatus.PARTIAL and result.corrupt == (2,)
            assert sorted(result.committed) == [1, 3, 4, 5] and dst.store.info("t", 2) is None
            for h in result.committed:
                assert bytes(dst.store.peek("t", h).buffer.view()) == source[h]
            assert dst.store.stats.rejected_checksum == 2  # the first try and the retry

    run(scenario(), timeout=20.0)


def test_large_blocks_cross_mutual_tls_intact(run, config, fill_agent, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from kvcast.serving.cluster.certs import make_cluster_certs

    tls = make_cluster_certs(tmp_path, ["a", "b"])

    async def scenario() -> None:
        async with Agent(config(), tls=tls["a"]) as src, Agent(config(), tls=tls["b"]) as dst:
            sizes = {1: 3 * MiB + 11, 2: 64 * KiB, 3: 1 * MiB}
            source = fill_agent(src, "t", sizes)
            result = await dst.pull(
                src.address, list(sizes), "t", time.monotonic() + 10, state=BlockState.CACHED
            )
            assert result.ok and sorted(result.committed) == [1, 2, 3]
            for h in sizes:
                assert bytes(dst.store.peek("t", h).buffer.view()) == source[h]

    run(scenario(), timeout=20.0)
