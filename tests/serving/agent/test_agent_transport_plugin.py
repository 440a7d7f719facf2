"""Any Transport plugs into the client, and the client (not the transport) verifies and commits:
an in-memory transport that delivers a corrupted block still cannot make it visible."""

from __future__ import annotations

import time

from kvcast.serving.agent import (
    BlockStore,
    HostAllocator,
    HostBuffer,
    PullStatus,
    TransferClient,
    Transport,
    checksum,
)
from kvcast.serving.agent.buffers import BufferAllocator
from kvcast.serving.agent.transport import BlockSink
from kvcast.serving.messages import BlockHeader, Done, PullRequest


class InMemoryTransport(Transport):
    """Serves pulls from a dict; flips a byte of the blocks listed in ``corrupt``."""

    def __init__(self, blocks: dict[int, bytes], corrupt: set[int]) -> None:
        self.blocks, self.corrupt, self.requests = blocks, corrupt, []

    async def pull(
        self, peer: str, request: PullRequest, sink: BlockSink, allocator: BufferAllocator
    ) -> Done:
        self.requests.append(request)
        missing = []
        for h in request.block_hashes:
            if h not in self.blocks:
                missing.append(h)
                continue
            data = self.blocks[h]
            buffer = allocator.allocate(len(data))
            buffer.view()[:] = data
            if h in self.corrupt:
                buffer.view()[0] ^= 0xFF
            sink(BlockHeader(h, request.tenant, len(data), checksum(data)), buffer)
        return Done(request.command_id, len(request.block_hashes) - len(missing), tuple(missing))


class CountingAllocator(HostAllocator):
    def __init__(self) -> None:
        self.allocated = 0

    def allocate(self, nbytes: int) -> HostBuffer:
        self.allocated += nbytes
        return super().allocate(nbytes)


def test_a_custom_transport_and_allocator_plug_in_and_checksums_still_guard(run) -> None:
    blocks = {1: b"a" * 100, 2: b"b" * 100}
    transport, allocator = InMemoryTransport(blocks, corrupt={2}), CountingAllocator()
    store = BlockStore(1 << 20, 1 << 19)
    client = TransferClient(store, transport, allocator=allocator, max_retries=1)
    result = run(client.pull("nowhere:1", [1, 2, 3], "t", time.monotonic() + 2))
    assert result.status is PullStatus.PARTIAL
    assert result.committed == (1,) and result.corrupt == (2,) and result.missing == (3,)
    assert store.peek("t", 1).buffer.tobytes() == blocks[1] and store.info("t", 2) is None
    assert [r.block_hashes for r in transport.requests] == [(1, 2, 3), (2,)]
    assert allocator.allocated == 300
