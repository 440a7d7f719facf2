"""A preallocated host-memory pool of fixed-size block slots.

A real agent reserves its memory up front (pinned and registered for DMA when a GPU or RDMA
NIC is used); receiving into fresh memory instead pays a page fault per 4 KiB on first touch.
A slot returns to the pool when its buffer's array is garbage: the store entry, a send in
progress and every ``memoryview`` from :meth:`HostBuffer.view` keep it alive. (A numpy slice of
the array does not: numpy points it at the pool's arena. Slice through ``view()`` instead.)
"""

from __future__ import annotations

import weakref

import numpy as np

from kvcast.serving.agent.buffers import HostBuffer


class HostBlockPool:
    """``slots`` slots of ``slot_bytes`` each, touched at creation; a :class:`BufferAllocator`.

    A request larger than a slot, or made while every slot is in use, falls back to a fresh
    allocation (counted in :attr:`fallbacks`).
    """

    def __init__(self, slot_bytes: int, slots: int) -> None:
        if slot_bytes <= 0 or slots <= 0:
            raise ValueError("slot_bytes and slots must be > 0")
        self.slot_bytes, self.slots = slot_bytes, slots
        self._arena = np.empty(slot_bytes * slots, dtype=np.uint8)
        self._arena.fill(0)  # fault every page in now, not on the receive path
        self._free = list(range(slots - 1, -1, -1))
        self.fallbacks = 0

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def allocate(self, nbytes: int) -> HostBuffer:
        if nbytes > self.slot_bytes or not self._free:
            self.fallbacks += 1
            return HostBuffer(np.empty(nbytes, dtype=np.uint8))
        slot = self._free.pop()
        start = slot * self.slot_bytes
        array = self._arena[start : start + nbytes]
        weakref.finalize(array, self._free.append, slot)
        return HostBuffer(array)
