"""What a pull reports: its status, the fate of every block, and the client's counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from kvcast.serving.messages import BlockHash


class PullStatus(StrEnum):
    OK = "ok"  # every requested block is now held, verified
    PARTIAL = "partial"  # some blocks committed or held, others not
    FAILED = "failed"  # nothing new committed and something is missing
    REFUSED = "refused"  # the peer refused the command (e.g. bad token)
    DEADLINE_EXCEEDED = "deadline_exceeded"  # cancelled at the deadline


@dataclass(frozen=True, slots=True)
class PullResult:
    command_id: str
    peer: str
    tenant: str
    status: PullStatus
    committed: tuple[BlockHash, ...] = ()  # verified and stored by this command
    already_present: tuple[BlockHash, ...] = ()  # held before the command; not moved
    missing: tuple[BlockHash, ...] = ()  # the peer does not have them
    incomplete: tuple[BlockHash, ...] = ()  # not received and verified in time
    corrupt: tuple[BlockHash, ...] = ()  # failed their checksum at least once
    rejected: tuple[BlockHash, ...] = ()  # verified, but the store had no room (quota)
    bytes_committed: int = 0
    attempts: int = 0
    elapsed_s: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PullStatus.OK


@dataclass(slots=True)
class TransferStats:
    pulls: int = 0
    pulls_ok: int = 0
    deadline_exceeded: int = 0
    refused: int = 0
    attempts: int = 0
    retries: int = 0
    blocks_committed: int = 0
    bytes_committed: int = 0
    bytes_already_held: int = 0  # verified bytes of blocks another command stored meanwhile
    checksum_failures: int = 0
    store_rejections: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
