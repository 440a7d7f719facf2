"""Blocks in accelerator memory: the agent's CUDA path (``kvcast serve agent --device cuda``).

A :class:`DeviceBuffer` holds one block in a ``torch`` tensor on the agent's device. The store
and the transports only read and write host memory (:meth:`BlockBuffer.view`), so a block
arrives in a host *staging* area (pinned memory on CUDA, so the copy is a DMA), is verified
there, and :meth:`DeviceBuffer.commit` copies it to the device once the store accepts it and
frees the staging area: a stored block occupies device memory only. Serving it to a peer
reads it back into host memory (one device-to-host copy per send, into pinned memory from
torch's caching host allocator, so the copy is a DMA and the pinned pages are reused from
send to send). Without GPUDirect this is what any TCP path does; a NIXL transport would move
the device memory directly. That cache keeps its peak and does not return it to the OS: up to
the blocks being sent at once (at most ``max_transfer_connections`` peers) times the block
size rounded up to a power of two, in pinned host memory that ``capacity_bytes`` does not
count.

``torch`` is imported only when a device buffer is made, so the agent and the sidecar stay
free of it unless a device is configured. The ``"cpu"`` device (torch host tensors) runs the
same code path and is what the tests exercise on machines without a GPU.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

DEVICE_PATTERN = re.compile(r"^(cpu|cuda(:\d{1,3})?)$")


class DeviceUnavailable(ValueError):
    """The configured device cannot be used on this machine."""


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise DeviceUnavailable(
            "device memory needs torch (pip install torch); use --device host"
        ) from None
    return torch


class DeviceBuffer:
    """One block in device memory, with its host staging area while it is being received."""

    __slots__ = ("_staging", "tensor")

    def __init__(self, tensor: Any, staging: np.ndarray | None) -> None:
        self.tensor = tensor  # 1-D uint8 on the device
        self._staging = staging  # host memory the bytes land in, until commit()

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel())

    @property
    def device(self) -> str:
        return str(self.tensor.device)

    @property
    def committed(self) -> bool:
        return self._staging is None

    def view(self) -> memoryview:
        """Before :meth:`commit`: the staging area (written by a transport, then verified).
        After: a host copy of the device bytes in pinned memory (for sending to a peer; the
        copy lives as long as the view; on torch's ``cpu`` device, the tensor's own memory)."""
        if self._staging is not None:
            return memoryview(self._staging).cast("B")
        tensor = self.tensor
        if not tensor.is_cuda:
            return memoryview(tensor.numpy()).cast("B")
        host = _torch().empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor)  # pinned destination: a DMA; blocking, so the bytes are there
        return memoryview(host.numpy()).cast("B")

    def commit(self) -> None:
        """Copy the staged bytes to the device and free the staging area (idempotent)."""
        staging = self._staging
        if staging is None:
            return
        tensor = self.tensor
        if tensor.is_cuda:  # pinned source: a DMA; blocking, so it has landed on return
            tensor.copy_(_torch().from_numpy(staging))
        else:  # numpy's copy: one thread (torch's would wake its intra-op pool for a memcpy)
            np.copyto(tensor.numpy(), staging)
        self._staging = None


class DeviceAllocator:
    """Makes :class:`DeviceBuffer` blocks on ``device`` (``"cuda"``, ``"cuda:N"``, ``"cpu"``);
    :class:`DeviceUnavailable` when torch or the device is missing."""

    def __init__(self, device: str) -> None:
        if not DEVICE_PATTERN.match(device):
            raise DeviceUnavailable(f"device must be cpu, cuda or cuda:N, got {device!r}")
        torch = _torch()
        dev = torch.device(device)
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise DeviceUnavailable(f"device {device!r}: no CUDA device on this machine")
            count = torch.cuda.device_count()
            if dev.index is not None and dev.index >= count:
                raise DeviceUnavailable(f"device {device!r}: this machine has {count} GPU(s)")
        self._torch, self.device, self.pinned = torch, dev, dev.type == "cuda"

    def allocate(self, nbytes: int) -> DeviceBuffer:
        torch = self._torch
        tensor = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        staging = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pinned).numpy()
        return DeviceBuffer(tensor, staging)
