"""The default transport: one TCP connection per pull attempt, a token bucket per link."""

from __future__ import annotations

import asyncio

from kvcast.serving.agent.buffers import BufferAllocator
from kvcast.serving.agent.rate_limit import TokenBucket
from kvcast.serving.agent.tcp_receiver import PullProtocol
from kvcast.serving.agent.transport import BlockSink, Transport, TransportError, parse_peer
from kvcast.serving.messages import Done, PullRequest, encode


class TcpTransport(Transport):
    """Pulls over TCP. ``link_bytes_per_s`` (None: unlimited) caps each peer link; all
    concurrent pulls from one peer share that link's bucket."""

    def __init__(
        self,
        link_bytes_per_s: float | None = None,
        link_burst_bytes: int = 4 << 20,
        max_block_bytes: int = 256 << 20,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.link_bytes_per_s, self.link_burst_bytes = link_bytes_per_s, link_burst_bytes
        self.max_block_bytes, self.connect_timeout_s = max_block_bytes, connect_timeout_s
        self._buckets: dict[str, TokenBucket] = {}

    def bucket(self, peer: str) -> TokenBucket | None:
        """The token bucket of the link to ``peer`` (None when links are unlimited)."""
        if self.link_bytes_per_s is None:
            return None
        if peer not in self._buckets:
            self._buckets[peer] = TokenBucket(self.link_bytes_per_s, self.link_burst_bytes)
        return self._buckets[peer]

    async def pull(
        self, peer: str, request: PullRequest, sink: BlockSink, allocator: BufferAllocator
    ) -> Done:
        host, port = parse_peer(peer)
        bucket = self.bucket(peer)
        chunk = max(64 << 10, min(1 << 20, self.link_burst_bytes))
        loop = asyncio.get_running_loop()

        def factory() -> PullProtocol:
            return PullProtocol(sink, allocator, self.max_block_bytes, bucket, chunk)

        try:
            async with asyncio.timeout(self.connect_timeout_s):
                transport, protocol = await loop.create_connection(factory, host, port)
        except (OSError, TimeoutError) as err:
            raise TransportError(f"cannot connect to {peer}: {err}") from None
        try:
            transport.write(encode(request))
            return await protocol.done
        finally:
            transport.abort()
