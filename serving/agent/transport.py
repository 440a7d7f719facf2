"""The transport interface: how a puller gets raw blocks from a peer.

TCP (:class:`~kvcast.serving.agent.tcp_transport.TcpTransport`) is the default; an RDMA or
NVLink transport (e.g. NIXL) implements the same :class:`Transport`. A transport delivers
blocks *unverified*: the caller verifies checksums and commits, whatever the transport. A
transport that reads the bytes anyway may hand over their digest, computed as they landed in
the block's buffer, so that verifying does not read the whole block a second time. A transport
authenticates this node to the peer itself (TCP: a ``Hello`` with the token, before the
request), so that a peer can refuse it before reading any request.
"""

from __future__ import annotations

import ipaddress
import re
from abc import ABC, abstractmethod
from typing import Protocol

from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator
from kvcast.serving.messages import BlockHeader, Done, PullRequest


class BlockSink(Protocol):
    """Called once per fully received block; may raise to abort the attempt."""

    def __call__(self, header: BlockHeader, buffer: BlockBuffer, digest: int | None = None) -> None:
        """``digest``: the xxh3-64 (:func:`~kvcast.serving.agent.checksum.checksum`) of exactly
        the bytes now in ``buffer``, computed by the transport as they arrived; the block is
        then verified by comparing it with ``header.checksum``. None: the caller computes it."""


class TransportError(Exception):
    """The attempt failed in a way a retry may fix (connection lost, bad frame, ...)."""


class PullRefused(Exception):
    """The peer refused the pull (bad token, bad request): retrying will not help."""


class Transport(ABC):
    """Moves the blocks of one :class:`PullRequest` from a peer to this node."""

    @abstractmethod
    async def pull(
        self, peer: str, request: PullRequest, sink: BlockSink, allocator: BufferAllocator
    ) -> Done:
        """One attempt: ask ``peer`` for ``request``'s blocks, hand each received block to
        ``sink`` (in a buffer from ``allocator``) and return the peer's :class:`Done`.

        Raises :class:`TransportError` (retryable) or :class:`PullRefused` (final).
        Cancellation must abort the attempt promptly and leave nothing half-delivered.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release long-lived resources (connections, registrations)."""


def parse_peer(peer: str, allow_port_zero: bool = False, key: str = "") -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); ValueError when malformed, its
    message led by ``key`` when given (a config's rule across keys names the one it read)."""
    where = f"{key}: " if key else ""
    host, sep, port = peer.rpartition(":")
    lowest = 0 if allow_port_zero else 1
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if (
        not sep or not _HOST.fullmatch(name) or not port.isascii() or not port.isdigit()
        or not lowest <= int(port) < 65536 or (":" in name and name == host)
    ):  # fmt: skip
        well_formed = sep and _HOST.fullmatch(name) and not (":" in name and name == host)
        if well_formed and port.isascii() and port.isdigit() and not lowest <= int(port) < 65536:
            raise ValueError(f"{where}port {port} of {peer!r} is out of range ({lowest}-65535)")
        raise ValueError(f"{where}address must be HOST:PORT, got {peer!r}")
    return name, int(port)


def binds_overlap(a: str, b: str) -> bool:
    """Whether listening on hosts ``a`` and ``b`` (as :func:`parse_peer` returns them) with the
    same port collides: the same host, or a wildcard covering the other (``0.0.0.0`` every
    IPv4 address and any name; ``::`` everything, IPv6 sockets being dual-stack on Linux)."""
    a, b = a.lower(), b.lower()
    if a == b or "::" in (a, b):
        return True
    for wild, other in ((a, b), (b, a)):
        if wild == "0.0.0.0":
            try:
                return ipaddress.ip_address(other.partition("%")[0]).version == 4
            except ValueError:
                return True  # a name: it may resolve to an IPv4 address of this host
    return False


# a host name, an IPv4 address, or (bracketed in the address) an IPv6 one: no scheme, no path,
# no whitespace (``http://0.0.0.0:8480`` passed the split and failed only at bind)
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?")
