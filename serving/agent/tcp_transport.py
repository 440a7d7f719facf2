"""The default transport: one TCP connection per pull attempt, a token bucket per link.

Each connection opens with this node's ``Hello`` (its token), written with the pull request
in one send: a source that refuses the token answers without parsing the request (and takes at
most a Hello's worth of these bytes, 4108, from its socket). The token never shows in an error:
one too long to send is refused by its length.

With a link limit, the connection's kernel receive buffer is capped at one read chunk: the
bucket then slows the sender through TCP flow control within a chunk or so, instead of the
kernel taking megabytes ahead of the limit (which would also let a transfer "complete" from
kernel buffers after its source died).
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from kvcast.serving.agent.buffers import BufferAllocator
from kvcast.serving.agent.tcp_receiver import STAGING_BYTES, PullProtocol
from kvcast.serving.agent.transport import BlockSink, Transport, TransportError, parse_peer
from kvcast.serving.messages import Done, Hello, PullRequest, encode
from kvcast.serving.token_bucket import TokenBucket

_STAGING_KEPT = 4  # receive areas kept for reuse (touched memory: no page faults next time)


class TcpTransport(Transport):
    """Pulls over TCP. ``link_bytes_per_s`` (None: unlimited) caps each peer link; all
    concurrent pulls from one peer share that link's bucket. ``token`` (empty: none) is the
    shared secret the peers' transfer servers check; ``node_id`` names this node to them."""

    def __init__(
        self,
        link_bytes_per_s: float | None = None,
        link_burst_bytes: int = 4 << 20,
        max_block_bytes: int = 256 << 20,
        connect_timeout_s: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        *,
        token: str = "",
        node_id: str = "",
    ) -> None:
        self.link_bytes_per_s, self.link_burst_bytes = link_bytes_per_s, link_burst_bytes
        self.max_block_bytes, self.connect_timeout_s = max_block_bytes, connect_timeout_s
        self.ssl_context = ssl_context  # mutual TLS to the peers (None: plain TCP)
        self._hello = encode(Hello(node_id, token))  # ValueError: a token too long to send
        self._buckets: dict[str, TokenBucket] = {}
        self._staging: list[bytearray] = []  # receive areas of finished pulls, for the next

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
        staging = self._staging.pop() if self._staging else bytearray(STAGING_BYTES)

        def factory() -> PullProtocol:
            return PullProtocol(sink, allocator, self.max_block_bytes, bucket, chunk, staging)

        tls = {"ssl": self.ssl_context, "server_hostname": host} if self.ssl_context else {}
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if bucket is None:
                    transport, protocol = await loop.create_connection(factory, host, port, **tls)
                else:
                    sock = await _connect_capped(loop, host, port, chunk)
                    transport, protocol = await loop.create_connection(factory, sock=sock, **tls)
        except (OSError, TimeoutError) as err:  # ssl.SSLError included
            if len(self._staging) < _STAGING_KEPT:
                self._staging.append(staging)
            raise TransportError(f"cannot connect to {peer}: {err}") from None
        try:
            transport.write(self._hello + encode(request))
            return await protocol.done
        finally:
            transport.abort()  # no more reads into ``staging``: it may serve the next pull
            if len(self._staging) < _STAGING_KEPT:
                self._staging.append(staging)


async def _connect_capped(
    loop: asyncio.AbstractEventLoop, host: str, port: int, rcvbuf: int
) -> socket.socket:
    """A connected non-blocking TCP socket whose receive buffer is ``rcvbuf`` bytes (set
    before connecting, so that the window is advertised from the start)."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock
