"""Each tenant token's share of the ingestion queue: the most of its arrivals the shared
queue may hold at once (``max_queue_share`` of ``queue_events``, per ``tenant_tokens``
entry), so that one tenant's router cannot fill the queue on its own while the consumer is
behind (the queue drops the oldest events to make room: other tenants', the engines'). The
shares are not checked to add up to at most the whole queue (two entries of 0.5 may fill it
together): set them so where that matters.

Checked before anything of the batch is taken (rate, request ids), on the arrivals it would
queue (a retried arrival, already seen, queues nothing): a batch that would take its token
past its share is refused whole, 429 with ``Retry-After`` (the queue drains in milliseconds
when the sidecar keeps up: a refusal means it does not); a batch larger than the whole share
never fits, 400. The shared token is never capped: it speaks for the operator.
The check and the put run on the API's event loop with no await between them, and only that
token's own posts add to its count, so a batch admitted fits when it is put.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastapi import HTTPException

from kvcast.serving.http.auth import Identity
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.tenant_tokens import TenantTokenConfig

RETRY_AFTER_S = 1


class QueueShares:
    """The cap, in events, of each tenant token (by its position in ``tenant_tokens``)."""

    def __init__(self, entries: Sequence[TenantTokenConfig], queue: EventQueue) -> None:
        self.queue = queue
        self.caps = {
            i: max(1, math.floor(e.max_queue_share * queue.capacity)) for i, e in enumerate(entries)
        }

    def admit(self, who: Identity, arrivals: int) -> HTTPException | None:
        """None when ``who``'s batch of ``arrivals`` fits its share of the queue now (or
        ``who`` is not capped); else the refusal to answer (429, or 400 for a batch over the
        whole share)."""
        cap = None if who.token is None else self.caps.get(who.token)
        if cap is None:
            return None
        if arrivals > cap:
            return HTTPException(
                400, f"a batch of {arrivals} arrivals is over this token's share of the "
                f"ingestion queue ({cap} events): it never fits; split it; nothing was taken",
            )  # fmt: skip
        held = self.queue.held(who.token)
        if held + arrivals <= cap:
            return None
        return HTTPException(
            429, f"this token's share of the ingestion queue is full ({held} of its {cap} "
            f"events wait for the sidecar's consumer); the batch of {arrivals} arrivals would "
            "pass it; nothing was taken",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )  # fmt: skip
