"""The KV transfer agent's core: a verified block store and agent-to-agent pulls over TCP.

Walk of one replication: the sidecar asks agent B to pull blocks of tenant T from agent A
(:meth:`Agent.pull`); B's :class:`TransferClient` sends a ``PullRequest`` through its
:class:`Transport` (TCP, after a ``Hello`` with B's token, which A checks first); A's
:class:`TransferServer` streams each block it holds as a ``BlockHeader`` + raw bytes; B lands
the bytes in a fresh buffer, and its :class:`BlockStore` stores the block only if the xxh3
checksum matches (as a speculative replica with a TTL, within the quota, evicting only other
replicas), retrying the rest until the deadline.

The control plane (``kvcast serve agent``): :mod:`.service` runs an agent and its HTTP API for
the sidecar on one event loop: routes in :mod:`.api`, bodies in :mod:`.api_models`, operations
in :mod:`.control`, Prometheus metrics in :mod:`.agent_metrics`. Those need FastAPI and uvicorn
(the ``serve`` extra) and are not imported here.
"""

from kvcast.serving.agent.agent import Agent
from kvcast.serving.agent.block_store import BlockStore
from kvcast.serving.agent.blocks import (
    BlockHeld,
    BlockInfo,
    BlockKey,
    BlockNotFound,
    BlockPinned,
    BlockState,
    ChecksumMismatch,
    QuotaExceeded,
    StoredBlock,
    StoreError,
    StoreFull,
    StoreStats,
)
from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator, HostAllocator, HostBuffer
from kvcast.serving.agent.checksum import checksum
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.host_pool import HostBlockPool
from kvcast.serving.agent.pull_result import PullResult, PullStatus, TransferStats
from kvcast.serving.agent.tcp_server import ServerStats, TransferServer
from kvcast.serving.agent.tcp_transport import TcpTransport
from kvcast.serving.agent.transfer import TransferClient
from kvcast.serving.agent.transport import PullRefused, Transport, TransportError

__all__ = [
    "Agent",
    "AgentConfig",
    "BlockBuffer",
    "BlockHeld",
    "BlockInfo",
    "BlockKey",
    "BlockNotFound",
    "BlockPinned",
    "BlockState",
    "BlockStore",
    "BufferAllocator",
    "ChecksumMismatch",
    "HostAllocator",
    "HostBlockPool",
    "HostBuffer",
    "PullRefused",
    "PullResult",
    "PullStatus",
    "QuotaExceeded",
    "ServerStats",
    "StoreError",
    "StoreFull",
    "StoreStats",
    "StoredBlock",
    "TcpTransport",
    "TransferClient",
    "TransferServer",
    "TransferStats",
    "Transport",
    "TransportError",
    "checksum",
]
