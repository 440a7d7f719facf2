"""The serving side of pulls: an asyncio-streams TCP server that sends blocks from a store.

One pull per connection: ``Hello`` (the puller's token) then ``PullRequest`` in; a
``BlockHeader`` and raw bytes per block held, then ``Done`` listing the blocks it lacks (or one
``Error``) out. Only blocks of the request's own tenant are ever read. With a token configured,
a peer whose ``Hello`` lacks it is refused (``UNAUTHORIZED``) and counted before any pull
request is parsed. A peer that presents a *tenant token* (``tenant_tokens``: a KV connector
reading its own tenants' replicas) may pull only blocks of those tenants: a request for
another tenant's is refused (``UNAUTHORIZED``, naming the tenant) and counted before any block
is looked up; and each tenant token is served at most its cap of pulls at once (more are
refused ``BUSY`` before their request is read), so that tenant tokens cannot hold the
connections the agents' own pulls need. The ingest token (the engines' reports over HTTP:
:mod:`~kvcast.serving.http.ingest_token`) is never given to it: a peer presenting it is
refused as one with an unknown token.

Authentication comes first (protocol version 2): of a peer not yet authenticated the server
parses a frame header and, if it announces a ``Hello`` of at most ``MAX_HELLO_BODY`` (4 KiB),
that body; any other first frame, or a longer one, is refused from its header alone. A peer of
another protocol version is refused from its header too, in an ``Error`` frame of its own
version where that version can read it (version 1), and counted. At most ``max_connections``
authenticated peers are served at once (another gets a ``BUSY`` error once its Hello is
read). Connections whose Hello is not yet in are a pool of their own, at most ``max_hellos``,
where a new connection always gets a place and a full pool closes one that sent no whole Hello
(:mod:`~kvcast.serving.agent.hello_pool`; counted in ``hellos_dropped``). A peer that sends no
complete ``Hello`` and request, or takes no bytes of the pull, for ``request_timeout_s`` is
cut off (:mod:`~kvcast.serving.agent.peer_writes`).
Over TLS, a peer whose handshake is not done ``tls_handshake_timeout_s`` after its connection
was accepted is cut off first (asyncio's ``ssl_handshake_timeout``; its default, 60 s,
otherwise): until its handshake is done a connection is neither served nor counted among the
``max_hellos``, yet holds a file descriptor and asyncio's TLS buffers.

What the server holds of a peer is bounded, not only what it parses: it takes from a peer's
socket at most :data:`LOOKAHEAD` bytes (``HEADER_SIZE + MAX_HELLO_BODY``, 4108: the largest
Hello frame) or, once it has asked for more, what it has asked for
(:class:`~kvcast.serving.agent.bounded_reader.BoundedReader`).
Before it has checked a peer's token it asks for no more than a Hello frame, so it holds at most
4108 bytes of a peer it has not authenticated, and of an authenticated one at most that or its
Hello and request frames. Whatever else a peer sends waits in the kernel's socket receive
buffer until TCP flow control stops the peer (asyncio's stream reader would take up to
2 x 64 KiB, plus one 256 KiB read, ahead of its reader). Over TLS (mutual for agents: the peer
has presented a certificate of the cluster's CA), asyncio's TLS layer reads the socket ahead of
this, up to one 256 KiB read past its 256 KiB high-water mark of encrypted bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypeVar

from kvcast.serving.agent.block_store import BlockStore
from kvcast.serving.agent.blocks import StoredBlock
from kvcast.serving.agent.bounded_reader import FrameSource, PeerProtocol
from kvcast.serving.agent.hello_pool import HelloPool
from kvcast.serving.agent.peer_writes import PeerStalled, close, drain
from kvcast.serving.agent.tenant_pulls import TenantPulls
from kvcast.serving.http.auth import Identity, KnownTokens
from kvcast.serving.messages import (
    ERROR_VERSIONS,
    HEADER_SIZE,
    MAX_HELLO_BODY,
    VERSION,
    BlockHash,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    Hello,
    Message,
    MsgType,
    ProtocolError,
    PullRequest,
    VersionMismatch,
    decode_body,
    decode_header,
    encode,
    version_refusal,
)
from kvcast.serving.tls import HANDSHAKE_TIMEOUT_S

_COALESCE_BYTES = 256 << 10
# All the server takes of a peer before it asks for more: the largest Hello frame. Before it
# has checked the peer's token it asks for no more than that.
LOOKAHEAD = HEADER_SIZE + MAX_HELLO_BODY
_CHUNK_BYTES = 1 << 20  # a large block is written a chunk at a time, each once the last is sent
log = logging.getLogger(__name__)
MAX_CONNECTIONS = 256  # authenticated peers served at once
MAX_HELLOS = 64  # connections waiting for their Hello (see hello_pool.py)
_REFUSAL_LOG_PERIOD_S = 10.0  # at most one log line per period per kind of refusal
_T = TypeVar("_T")


async def read_frame(reader: FrameSource) -> Message:
    """Read one complete frame; raises ProtocolError or asyncio.IncompleteReadError."""
    mtype, length = decode_header(await reader.readexactly(HEADER_SIZE))
    return decode_body(mtype, await reader.readexactly(length))


async def read_hello(reader: FrameSource) -> Hello:
    """Read a connection's first frame, which must be a :class:`Hello`: at most
    ``HEADER_SIZE + MAX_HELLO_BODY`` bytes are asked for, any other frame (or version) is
    refused from its header (ProtocolError, VersionMismatch, asyncio.IncompleteReadError)."""
    mtype, length = decode_header(await reader.readexactly(HEADER_SIZE))
    if mtype is not MsgType.HELLO:
        raise ProtocolError(f"expected a Hello first, got a {mtype.name} header")
    hello = decode_body(mtype, await reader.readexactly(length))
    assert isinstance(hello, Hello)
    return hello


@dataclass(slots=True)
class ServerStats:
    pulls_served: int = 0
    blocks_sent: int = 0
    bytes_sent: int = 0
    blocks_missing: int = 0
    auth_refused: int = 0
    bad_requests: int = 0
    aborted: int = 0
    internal_errors: int = 0
    busy_refused: int = 0  # connections refused: max_connections peers being served
    hellos_dropped: int = 0  # connections closed before their Hello: max_hellos newer ones
    stalled: int = 0  # pulls cut off: the peer took no bytes for request_timeout_s
    version_refused: int = 0  # peers refused: they speak another protocol version
    tenant_refused: int = 0  # pulls refused: a tenant token asked for another tenant's blocks
    tenant_busy_refused: int = 0  # pulls refused: a tenant token had its pulls at once

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class TransferServer:
    """Serves pulls of ``store``'s blocks to peers; over TLS when given ``ssl_context``, each
    peer's handshake bounded by ``tls_handshake_timeout_s`` (seconds, from its accept).
    ``token``: the shared token (None: no authentication); ``tenant_tokens`` (secret -> the
    tenants it speaks for; they need a shared token): peers that may pull those tenants'
    blocks only, each at most ``tenant_pull_caps[i]`` pulls at once (in their order;
    :class:`~kvcast.serving.agent.tenant_pulls.TenantPulls`), so that tenant tokens cannot take
    every connection from the peers that replicate for all tenants."""

    def __init__(
        self, store: BlockStore, token: str | None = None, request_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None, max_connections: int = MAX_CONNECTIONS,
        tls_handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        tenant_tokens: Mapping[str, Collection[str]] | None = None,
        tenant_pull_caps: Sequence[int] = (), max_hellos: int = MAX_HELLOS,
    ) -> None:  # fmt: skip
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        if not 0 < tls_handshake_timeout_s < math.inf:  # NaN too
            raise ValueError(
                f"tls_handshake_timeout_s must be a positive number of seconds, "
                f"got {tls_handshake_timeout_s!r}"
            )
        self.store, self.request_timeout_s, self.ssl_context = store, request_timeout_s, ssl_context
        self.max_connections = max_connections
        self.hellos = HelloPool(max_hellos)  # connections whose Hello is not in yet
        self.tls_handshake_timeout_s = tls_handshake_timeout_s
        self.tokens = KnownTokens(token, tenant_tokens)
        self.tenant_pulls = TenantPulls(len(tenant_tokens or ()), tenant_pull_caps)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.connections = 0  # authenticated peers being served now (refused ones not)
        self._stopping = False
        self._log_after: dict[str, float] = {}  # per kind of refusal: when to log the next
        self.stats = ServerStats()

    @property
    def address(self) -> str:
        """``host:port`` actually bound (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("server not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        loop = asyncio.get_running_loop()
        # asyncio refuses a handshake timeout without TLS
        tls = {} if self.ssl_context is None else {
            "ssl": self.ssl_context, "ssl_handshake_timeout": self.tls_handshake_timeout_s,
        }  # fmt: skip
        self._server = await loop.create_server(
            lambda: PeerProtocol(self._handle, LOOKAHEAD), host, port, **tls
        )
        return self.address

    async def stop(self) -> None:
        """Stop listening and abort the pulls being served."""
        if self._server is None:
            return
        self._server.close()
        self._stopping = True
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server, self._stopping = None, False

    def identify(self, hello: Hello) -> Identity | None:
        """Whom the Hello's token speaks for (None: no known token; constant-time checks;
        every tenant when no token is configured)."""
        return self.tokens.identify(hello.token.encode())

    async def _handle(self, reader: FrameSource, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        if self.hellos.admit(task, reader, writer):
            self.stats.hellos_dropped += 1
        try:
            await self._converse(reader, writer, task)
            await self._close(writer)
        except asyncio.CancelledError:
            writer.transport.abort()
            if not self._stopping:
                raise
            # stop() aborting the pull: the handler ends normally (a task that ends cancelled
            # makes asyncio's stream callback log a CancelledError traceback on Python 3.11)
            self.stats.aborted += 1
        finally:
            self.hellos.settled(task)

    async def _converse(
        self, reader: FrameSource, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        """Authenticate the peer, read its request and serve it; every failure is answered
        (when the peer still listens) and counted here."""
        command_id = ""
        deadline = asyncio.get_running_loop().time() + self.request_timeout_s
        try:
            try:
                hello = await self._before(deadline, read_hello(reader))
            except (asyncio.IncompleteReadError, ConnectionError):
                if task in self.hellos:
                    raise
                return  # closed for a newer connection (counted in hellos_dropped)
            self.hellos.settled(task)  # its Hello is in: out of the pool that waits for one
            who_is = self.identify(hello)
            if who_is is None:  # nothing of a pull request has been parsed
                self.stats.auth_refused += 1
                who = f"node {hello.node_id!r} (its claim)"
                self._log_refusal("token", writer, who, "bad token", self.stats.auth_refused)
                await self._send_error(writer, ErrorCode.UNAUTHORIZED, "", "bad token")
                return
            if self.connections >= self.max_connections:  # before its request is read
                self.stats.busy_refused += 1
                busy = f"busy: serving {self.max_connections} peers; retry later"
                await self._send_error(writer, ErrorCode.BUSY, "", busy)
                return
            self.connections += 1
            token, pulls = who_is.token, self.tenant_pulls
            taken = token is not None and pulls.take(token)
            try:
                if token is not None and not taken:
                    self.stats.tenant_busy_refused += 1  # before its request is read
                    busy = (
                        f"busy: this token has its {pulls.caps[token]} pulls at once; retry later"
                    )
                    who = _tenant_peer(hello, who_is)
                    count = self.stats.tenant_busy_refused
                    self._log_refusal("tenant_busy", writer, who, busy, count)
                    await self._send_error(writer, ErrorCode.BUSY, "", busy)
                    return
                request = await self._before(deadline, read_frame(reader))
                if not isinstance(request, PullRequest):
                    raise ProtocolError(f"expected a PullRequest, got {type(request).__name__}")
                command_id = request.command_id
                if not who_is.speaks_for(request.tenant):  # before any block is looked up
                    self.stats.tenant_refused += 1
                    who = _tenant_peer(hello, who_is)
                    refusal = f"this token may not pull blocks of tenant {request.tenant!r}"
                    self._log_refusal("tenant", writer, who, refusal, self.stats.tenant_refused)
                    await self._send_error(writer, ErrorCode.UNAUTHORIZED, command_id, refusal)
                    return
                await self._serve(request, writer)
            finally:
                self.connections -= 1
                if taken:
                    pulls.give_back(token)
        except VersionMismatch as err:
            self.stats.version_refused += 1
            refusal = version_refusal(VERSION, err.version)
            self._log_refusal("version", writer, "", refusal, self.stats.version_refused)
            version = err.version if err.version in ERROR_VERSIONS else VERSION
            with contextlib.suppress(ConnectionError):
                await self._send_error(writer, ErrorCode.BAD_REQUEST, "", refusal, version)
        except (ProtocolError, asyncio.IncompleteReadError) as err:
            self.stats.bad_requests += 1
            with contextlib.suppress(ConnectionError):
                await self._send_error(writer, ErrorCode.BAD_REQUEST, command_id, str(err))
        except PeerStalled:
            self.stats.stalled += 1
            writer.transport.abort()  # what it never took is dropped, its blocks released
        except ConnectionError:
            self.stats.aborted += 1
        except Exception as err:  # a bug or a broken buffer: count, log, tell the peer
            self.stats.internal_errors += 1
            log.exception("serving pull %r failed", command_id)
            with contextlib.suppress(Exception):
                await self._send_error(writer, ErrorCode.INTERNAL, command_id, repr(err))

    async def _before(self, deadline: float, read: Awaitable[_T]) -> _T:
        """``read``, cut off at ``deadline`` (the loop's clock): the Hello and the request
        share one ``request_timeout_s``."""
        try:
            async with asyncio.timeout_at(deadline):
                return await read
        except TimeoutError:
            msg = f"no complete request within {self.request_timeout_s:g} s"
            raise ProtocolError(msg) from None

    def _log_refusal(
        self, kind: str, writer: asyncio.StreamWriter, who: str, why: str, count: int
    ) -> None:
        """Log a refused peer, at most once a period per ``kind`` (a peer with a stale token,
        or a rolling upgrade, is refused on every attempt): the metrics count them all."""
        now = time.monotonic()
        if now < self._log_after.get(kind, 0.0):
            return
        self._log_after[kind] = now + _REFUSAL_LOG_PERIOD_S
        peer = writer.get_extra_info("peername")
        log.warning("refused a pull from %s%s: %s (%d such refusals so far)",
                    peer, f", {who}" if who else "", why, count)  # fmt: skip

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Close after the last bytes are sent, within the request timeout (tests hook it)."""
        await close(writer, self.request_timeout_s)

    async def _serve(self, request: PullRequest, writer: asyncio.StreamWriter) -> None:
        missing: list[BlockHash] = []
        sent = 0
        for block_hash in request.block_hashes:
            block = self.store.peek(request.tenant, block_hash)
            if block is None:
                missing.append(block_hash)
                continue
            await self.send_block(writer, request.tenant, block_hash, block)
            sent += 1
            self.stats.blocks_sent += 1
            self.stats.bytes_sent += block.buffer.nbytes
        self.stats.blocks_missing += len(missing)
        writer.write(encode(Done(request.command_id, sent, tuple(missing))))
        await drain(writer, self.request_timeout_s)
        self.stats.pulls_served += 1

    async def send_block(
        self, writer: asyncio.StreamWriter, tenant: str, block_hash: BlockHash, block: StoredBlock
    ) -> None:
        """Write one block frame and its bytes (tests override this to inject faults).

        A small block goes in one write. A large one goes a chunk at a time, each written once
        the transport has passed everything before it to the kernel: the socket then takes the
        chunk straight from the block's memory, whereas asyncio copies any part of a write the
        socket does not take at once (all of a large block, but for what fits the socket).
        """
        view = block.buffer.view()
        header = encode(BlockHeader(block_hash, tenant, len(view), block.checksum))
        if len(view) <= _COALESCE_BYTES:
            writer.write(b"".join((header, view)))  # one send for a small block
            await drain(writer, self.request_timeout_s)
            return
        writer.write(header)
        for at in range(0, len(view), _CHUNK_BYTES):
            await drain(writer, self.request_timeout_s, flushed=True)
            writer.write(view[at : at + _CHUNK_BYTES])
        await drain(writer, self.request_timeout_s)

    async def _send_error(
        self, writer: asyncio.StreamWriter, code: ErrorCode, command_id: str, message: str,
        version: int = VERSION,
    ) -> None:  # fmt: skip
        writer.write(encode(Error(code, command_id, message[:500]), version))
        await drain(writer, self.request_timeout_s)


def _tenant_peer(hello: Hello, who: Identity) -> str:
    """A tenant token's peer as a refusal's log line names it (never the token)."""
    return f"node {hello.node_id!r} (its claim), a token of {sorted(who.tenants or ())}"
