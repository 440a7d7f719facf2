"""Where a block's bytes live: the buffer interface of the store and the transports.

The store and the TCP transport only use :class:`BlockBuffer` and :class:`BufferAllocator`.
Host memory (numpy ``uint8`` arrays) is the default; device memory
(:mod:`kvcast.serving.agent.device_memory`) returns buffers whose :meth:`BlockBuffer.view` is
a host staging area (pinned memory) until the store accepts the block and calls
:meth:`BlockBuffer.commit`, which copies it to the device.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class BlockBuffer(Protocol):
    """A fixed-size run of bytes holding one block."""

    @property
    def nbytes(self) -> int: ...

    @property
    def device(self) -> str:
        """``"cpu"`` for host memory, ``"cuda:N"`` for device memory."""
        ...

    def view(self) -> memoryview:
        """A writable, host-addressable, C-contiguous byte view of the whole block."""
        ...

    def commit(self) -> None:
        """The store accepted the block (its bytes verified): move them where they live."""
        ...


class BufferAllocator(Protocol):
    """Makes empty buffers for blocks about to be received."""

    def allocate(self, nbytes: int) -> BlockBuffer: ...


class HostBuffer:
    """A block in host memory, backed by a 1-D ``uint8`` numpy array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        if array.dtype != np.uint8 or array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError("HostBuffer needs a 1-D C-contiguous uint8 array")
        self.array = array

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> HostBuffer:
        """A buffer holding a private copy of ``data``."""
        return cls(np.frombuffer(data, dtype=np.uint8).copy())

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    @property
    def device(self) -> str:
        return "cpu"

    def view(self) -> memoryview:
        return memoryview(self.array).cast("B")

    def commit(self) -> None:
        """Host memory is where the block lives already."""

    def tobytes(self) -> bytes:
        return self.array.tobytes()


class HostAllocator:
    """Allocates :class:`HostBuffer` blocks (uninitialised numpy arrays)."""

    def allocate(self, nbytes: int) -> HostBuffer:
        return HostBuffer(np.empty(nbytes, dtype=np.uint8))
