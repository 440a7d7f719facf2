"""The one bounded queue between every event source and the single consumer.

Producers (one ZMQ thread per engine, the HTTP handlers, the telemetry poller, the executor)
put *batches* of events; the consumer takes them in arrival order. The bound is in events,
not batches: when a put would exceed it, the *oldest* queued events are dropped (a batch may
be cut at its head) and counted, so memory stays bounded whatever the producers do and the
freshest events, which matter most for the next decision, survive; the removals among them
are kept, folded (:mod:`.salvage`), and handed to the consumer before the next batch, so that
no dropped ``BlockRemoved`` leaves a block resident in the sidecar's view. ``put`` never
blocks.

A batch may be put on behalf of an *owner* (a tenant token, by its position in
``tenant_tokens``): the queue keeps how many of each owner's events it holds (:meth:`held`),
whether they leave by the consumer or by a drop, so that each tenant token's share of the
queue can be capped before its batch is taken (:mod:`.queue_shares`).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Hashable, Sequence

from kvcast.features.events import Event
from kvcast.serving.sidecar.salvage import RemovalSalvage


class EventQueue:
    def __init__(self, capacity_events: int) -> None:
        if capacity_events < 1:
            raise ValueError("capacity_events must be >= 1")
        self.capacity = capacity_events
        self._batches: deque[tuple[Hashable | None, list[Event]]] = deque()  # (owner, events)
        self._held: Counter[Hashable] = Counter()  # events queued per owner
        self._size = 0
        self._cond = threading.Condition(threading.Lock())
        self._woken = False
        self.accepted: Counter[str] = Counter()  # events put, by source
        self.dropped = 0  # events dropped because the queue was full
        self.peak = 0  # most events held at once
        self.salvage = RemovalSalvage(capacity_events)  # the removals among dropped events

    def put(self, events: Sequence[Event], source: str, owner: Hashable | None = None) -> int:
        """Queue ``events`` (in order, on behalf of ``owner`` when given); return how many
        queued events were dropped for them."""
        if not events:
            return 0
        batch = list(events)
        with self._cond:
            self.accepted[source] += len(batch)
            if len(batch) > self.capacity:  # a batch larger than the whole queue: keep its tail
                cut = len(batch) - self.capacity
                self.salvage.fold(batch[:cut])
                batch = batch[cut:]
                dropped = cut
            else:
                dropped = 0
            self._batches.append((owner, batch))
            self._size += len(batch)
            if owner is not None:
                self._held[owner] += len(batch)
            excess = self._size - self.capacity
            while excess > 0:
                head_owner, head = self._batches[0]
                if len(head) <= excess:
                    self._batches.popleft()
                    n = len(head)
                else:
                    self._batches[0] = (head_owner, head[excess:])
                    n = excess
                if head_owner is not None:
                    self._release(head_owner, n)
                self.salvage.fold(head[:n])
                self._size -= n
                excess -= n
                dropped += n
            self.dropped += dropped
            self.peak = max(self.peak, self._size)
            self._cond.notify()
        return dropped

    def get(self, max_events: int, timeout_s: float) -> list[list[Event]]:
        """Up to about ``max_events`` queued events as batches, oldest first; waits up to
        ``timeout_s`` for the first one (an empty list when none came)."""
        with self._cond:
            self._cond.wait_for(lambda: self._size > 0 or self._woken, timeout_s)
            self._woken = False
            out: list[list[Event]] = []
            if salvaged := self.salvage.take():  # older than anything still queued
                out.append(salvaged)
            taken = 0
            while self._batches and taken < max_events:
                owner, batch = self._batches.popleft()
                out.append(batch)
                taken += len(batch)
                if owner is not None:
                    self._release(owner, len(batch))
            self._size -= taken
            return out

    def held(self, owner: Hashable) -> int:
        """Events of ``owner``'s batches still queued."""
        with self._cond:
            return self._held[owner]

    def _release(self, owner: Hashable, n: int) -> None:
        left = self._held[owner] - n
        if left:
            self._held[owner] = left
        else:
            del self._held[owner]

    def wake(self) -> None:
        """Wake a waiting consumer (to see a query or a stop request at once)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return self._size
