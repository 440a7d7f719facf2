"""Idempotent commands: one run per command id, however often and concurrently it is sent."""

from __future__ import annotations

import asyncio

import pytest

from kvcast.serving.agent.command_log import CommandLog


def test_concurrent_repeats_share_one_run(run) -> None:
    calls = 0

    async def work() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return 42

    async def scenario() -> list[int]:
        log: CommandLog[int] = CommandLog()
        results = await asyncio.gather(*(log.run_once("c", work) for _ in range(5)))
        results.append(await log.run_once("c", work))
        assert log.duplicates == 5
        return results

    assert run(scenario()) == [42] * 6 and calls == 1


def test_a_crashed_run_is_not_recorded_so_the_id_can_run_again(run) -> None:
    async def boom() -> int:
        raise RuntimeError("boom")

    async def ok() -> int:
        return 1

    async def scenario() -> int:
        log: CommandLog[int] = CommandLog()
        with pytest.raises(RuntimeError):
            await log.run_once("c", boom)
        assert "c" not in log
        return await log.run_once("c", ok)

    assert run(scenario()) == 1


def test_the_log_keeps_only_the_most_recent_finished_commands(run) -> None:
    async def scenario() -> CommandLog[int]:
        log: CommandLog[int] = CommandLog(capacity=3)
        for i in range(10):
            await log.run_once(f"c{i}", lambda i=i: asyncio.sleep(0, result=i))
        return log

    log = run(scenario())
    assert [f"c{i}" in log for i in range(10)] == [False] * 7 + [True] * 3
