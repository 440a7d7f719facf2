"""One KV transfer agent: a block store, the server that lets peers pull from it, and the
client that pulls from peers into it, all on one asyncio event loop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from types import TracebackType

from kvcast.serving.agent.block_store import BlockStore
from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator, HostAllocator, HostBuffer
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.host_pool import HostBlockPool
from kvcast.serving.agent.pull_result import PullResult
from kvcast.serving.agent.tcp_server import TransferServer
from kvcast.serving.agent.tcp_transport import TcpTransport
from kvcast.serving.agent.transfer import TransferClient
from kvcast.serving.agent.transport import Transport, parse_peer
from kvcast.serving.gc_pacing import GcPacer
from kvcast.serving.http.tenant_tokens import TenantTokens, given_tenant_tokens
from kvcast.serving.messages import BlockHash
from kvcast.serving.tls import TlsFiles


class Agent:
    """Owns ``store``, ``server`` and ``client``; ``async with Agent(cfg)`` serves on
    ``cfg.transfer_listen`` until the block exits."""

    def __init__(
        self,
        config: AgentConfig,
        transport: Transport | None = None,
        allocator: BufferAllocator | None = None,
        clock: Callable[[], float] = time.monotonic,
        tls: TlsFiles | None = None,
        tenant_tokens: TenantTokens | None = None,
    ) -> None:
        """``tenant_tokens``: the secrets of ``config.tenant_tokens`` (secret -> its tenants,
        one per entry, in order: :func:`~kvcast.serving.http.tenant_tokens.read_tenant_tokens`
        reads them), peers that may pull those tenants' blocks only."""
        self.config, self.tls = config, tls
        self.tenant_tokens = given_tenant_tokens(tenant_tokens, config.tenant_tokens)
        self.incarnation = uuid.uuid4().hex  # this life of the agent (telemetry tells it)
        # started by the process (run_agent), not by an in-process agent: it owns the
        # interpreter's collector settings; its pauses are served on /metrics either way
        self.gc = GcPacer(config.gc.full_every_s, config.gc.thaw_every, prefix="kvcast_agent_")
        # the transfer server's tokens: never the ingest token (HTTP reports only), so a
        # Hello carrying it is refused as an unknown token's
        token = config.token_value
        self.store = BlockStore(
            config.capacity_bytes,
            config.speculative_quota_bytes,
            config.speculative_ttl_s,
            clock=clock,
        )
        self.server = TransferServer(
            self.store, token, config.request_timeout_s,
            ssl_context=tls.server_context() if tls is not None else None,
            max_connections=config.max_transfer_connections,
            tls_handshake_timeout_s=config.transfer_tls_handshake_timeout_s,
            tenant_tokens=self.tenant_tokens,
            tenant_pull_caps=[e.max_pulls for e in config.tenant_tokens],
            max_hellos=config.max_transfer_hellos,
        )  # fmt: skip
        if allocator is None and config.device != "host":
            from kvcast.serving.agent.device_memory import DeviceAllocator  # imports torch

            allocator = DeviceAllocator(config.device)
        if allocator is None and config.pool_slot_bytes is not None:
            slots = max(1, config.capacity_bytes // config.pool_slot_bytes)
            allocator = HostBlockPool(config.pool_slot_bytes, slots)
        transport = transport or TcpTransport(
            config.link_bytes_per_s,
            config.link_burst_bytes,
            config.max_block_bytes,
            config.connect_timeout_s,
            ssl_context=tls.client_context() if tls is not None else None,
            token=token or "",
            node_id=config.node_id,
        )
        self.client = TransferClient(
            self.store,
            transport,
            allocator=allocator,
            max_retries=config.max_retries,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=config.backoff_max_s,
        )

    def buffer_for(self, data: bytes) -> BlockBuffer:
        """A buffer holding a copy of ``data`` where this agent keeps its blocks (an upload
        from the engine): host memory, or staged for the device."""
        allocator = self.client.allocator
        if isinstance(allocator, HostAllocator | HostBlockPool):
            return HostBuffer.from_bytes(data)  # uploads do not take receive-pool slots
        buffer = allocator.allocate(len(data))
        buffer.view()[:] = data
        return buffer

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> str:
        """Listen on ``config.transfer_listen`` (port 0: ephemeral); return the bound address."""
        host, port = parse_peer(self.config.transfer_listen, allow_port_zero=True)
        return await self.server.start(host, port)

    async def stop(self) -> None:
        await self.server.stop()
        await self.client.transport.close()

    async def pull(
        self,
        peer: str,
        block_hashes: Iterable[BlockHash],
        tenant: str,
        deadline: float,
        *,
        command_id: str | None = None,
        state: BlockState = BlockState.SPECULATIVE,
        ttl_s: float | None = None,
    ) -> PullResult:
        """See :meth:`TransferClient.pull`."""
        return await self.client.pull(
            peer, block_hashes, tenant, deadline, command_id=command_id, state=state, ttl_s=ttl_s
        )

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
