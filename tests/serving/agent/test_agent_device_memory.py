"""The agent's device-memory path: blocks land in host staging memory, are verified there,
and live on the device once stored; pulls into a device agent and pulls served from one move
the same bytes as the host path. On a machine without a GPU the same code runs on torch's
``cpu`` device; the CUDA test runs where a GPU is present."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from kvcast.serving.agent import Agent, BlockState, HostBuffer, PullStatus, StoreError, checksum
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.device_memory import DeviceAllocator, DeviceBuffer, DeviceUnavailable

KiB = 1024
CUDA = torch.cuda.is_available()


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def test_a_block_is_verified_in_staging_then_lives_on_the_device() -> None:
    buf = DeviceAllocator("cpu").allocate(4 * KiB)
    assert not buf.committed and buf.nbytes == 4 * KiB
    data = bytes(range(256)) * 16
    buf.view()[:] = data
    buf.commit()
    assert buf.committed and bytes(buf.tensor.numpy()) == data  # the device tensor holds it
    assert bytes(buf.view()) == data  # read back for a send
    buf.commit()  # idempotent
    assert bytes(buf.view()) == data


def test_the_store_commits_what_it_accepts_and_nothing_else(make_block) -> None:
    from kvcast.serving.agent import BlockStore, ChecksumMismatch

    store = BlockStore(64 * KiB, 0)
    alloc = DeviceAllocator("cpu")
    good, bad = alloc.allocate(KiB), alloc.allocate(KiB)
    good.view()[:] = bad.view()[:] = b"k" * KiB
    store.put("t", 1, good, checksum(b"k" * KiB))
    assert good.committed
    with pytest.raises(ChecksumMismatch):
        store.put("t", 2, bad, checksum(b"x" * KiB))
    assert not bad.committed and store.info("t", 2) is None


class FailingCommit(HostBuffer):
    """A buffer whose move to its device fails (as a CUDA out-of-memory would)."""

    def commit(self) -> None:
        raise RuntimeError("CUDA out of memory")


def test_a_block_that_cannot_reach_its_device_is_refused_and_not_stored() -> None:
    from kvcast.serving.agent import BlockStore

    store = BlockStore(64 * KiB, 0)
    buf = FailingCommit.from_bytes(b"z" * KiB)
    with pytest.raises(StoreError, match="could not be moved to its device: CUDA out of memory"):
        store.put("t", 1, buf, checksum(b"z" * KiB))
    assert store.info("t", 1) is None and store.used_bytes == 0


def _relay(run, config, fill_agent, device: str) -> None:
    """host agent -> device agent -> host agent: every hop byte-identical."""

    async def scenario() -> None:
        sizes = {1: 1, 2: 64 * KiB, 3: 300 * KiB + 7, 4: 0}
        mid_agent = Agent(config(), allocator=DeviceAllocator(device))
        async with Agent(config()) as src, mid_agent as mid, Agent(config()) as dst:
            source = fill_agent(src, "t", sizes)
            got = await mid.pull(src.address, list(sizes), "t", soon(), ttl_s=60.0)
            assert got.status is PullStatus.OK, got
            for h, data in source.items():
                block = mid.store.peek("t", h)
                assert isinstance(block.buffer, DeviceBuffer) and block.buffer.committed
                assert block.buffer.device.startswith(device)
                assert bytes(block.buffer.view()) == data
            got = await dst.pull(mid.address, list(sizes), "t", soon(), state=BlockState.CACHED)
            assert got.status is PullStatus.OK, got
            for h, data in source.items():
                assert bytes(dst.store.peek("t", h).buffer.view()) == data

    run(scenario())


def test_pulls_into_and_out_of_a_device_agent_move_the_same_bytes(run, config, fill_agent) -> None:
    _relay(run, config, fill_agent, "cpu")


@pytest.mark.skipif(not CUDA, reason="no CUDA device: the GPU path runs on a GPU machine")
def test_pulls_into_and_out_of_a_cuda_agent_move_the_same_bytes(run, config, fill_agent) -> None:
    _relay(run, config, fill_agent, "cuda")


@pytest.mark.skipif(not CUDA, reason="no CUDA device: the GPU path runs on a GPU machine")
def test_a_cuda_agent_keeps_its_blocks_in_device_memory(run, config) -> None:
    async def scenario() -> None:
        async with Agent(config(device="cuda")) as a:
            buf = a.buffer_for(b"g" * KiB)
            a.store.put("t", 1, buf, checksum(b"g" * KiB))
            tensor = a.store.peek("t", 1).buffer.tensor
            assert tensor.is_cuda and bytes(tensor.cpu().numpy()) == b"g" * KiB

    run(scenario())


@pytest.mark.skipif(not CUDA, reason="no CUDA device: the GPU path runs on a GPU machine")
def test_a_cuda_block_is_read_back_into_pinned_memory_for_a_send() -> None:
    buf = DeviceAllocator("cuda").allocate(64 * KiB)
    data = bytes(range(256)) * 256
    buf.view()[:] = data
    buf.commit()
    view = buf.view()
    assert bytes(view) == data
    assert torch.from_numpy(np.asarray(view)).is_pinned()  # a DMA, not a pageable bounce
    assert not torch.from_numpy(buf.tensor.cpu().numpy()).is_pinned()  # what it would be


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA device")
def test_a_cuda_agent_on_a_machine_without_one_is_refused_naming_the_device(config) -> None:
    with pytest.raises(DeviceUnavailable, match="'cuda:1': no CUDA device"):
        Agent(config(device="cuda:1"))


def test_a_device_string_that_names_no_device_is_refused() -> None:
    with pytest.raises(DeviceUnavailable, match="got 'gpu0'"):
        DeviceAllocator("gpu0")
    with pytest.raises(ValueError, match="device"):
        AgentConfig(capacity_bytes=KiB, speculative_quota_bytes=0, device="tpu")


def test_the_host_receive_pool_and_a_device_are_refused_together() -> None:
    with pytest.raises(ValueError, match="pool_slot_bytes is a host-memory receive pool"):
        AgentConfig(capacity_bytes=64 * KiB, speculative_quota_bytes=0, pool_slot_bytes=KiB,
                    device="cuda")  # fmt: skip


def test_uploads_to_a_device_agent_are_stored_on_its_device(run) -> None:
    import httpx

    from kvcast.serving.agent.api import build_app
    from kvcast.serving.agent.control import AgentControl

    async def scenario() -> None:
        cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=0)
        async with Agent(cfg, allocator=DeviceAllocator("cpu")) as a:
            app = build_app(AgentControl(a), None)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
                data = b"u" * 3000
                headers = {
                    "Content-Type": "application/octet-stream", "X-Kvcast-Tenant": "t",
                    "X-Kvcast-Block-Hash": "5", "X-Kvcast-Checksum": str(checksum(data)),
                }  # fmt: skip
                r = await http.put("/v1/blocks", content=data, headers=headers)
                assert r.status_code == 200, r.text
            block = a.store.peek("t", 5)
            assert isinstance(block.buffer, DeviceBuffer) and block.buffer.committed
            assert bytes(block.buffer.view()) == data

    run(scenario())


def test_a_host_agent_and_the_sidecar_never_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kvcast.serving.agent import Agent\n"
        "from kvcast.serving.agent.config import AgentConfig\n"
        "import kvcast.serving.agent.service, kvcast.serving.sidecar.core\n"
        "Agent(AgentConfig(capacity_bytes=1024, speculative_quota_bytes=0))\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
