"""The decision loop's thread runs its between-ticks hook (the paced GC) after every tick, a
failed one too, and a hook that raises stops neither the hook nor the ticks."""

from __future__ import annotations

import asyncio
import time

from sidecar_harness import open_sidecar, sidecar_config


def test_the_hook_runs_after_failed_ticks_and_survives_its_own_errors(tmp_path, run) -> None:
    calls: list[int] = []

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, tick_ms=5.0)) as (sc, _):

            def hook() -> None:
                calls.append(sc.loop.errors)
                raise RuntimeError("a hook that fails")

            def broken(*args: object) -> None:
                raise RuntimeError("a view that cannot be built")

            sc.loop.between_ticks = hook
            sc.loop.live.view = broken
            sc.loop.start()
            deadline = time.monotonic() + 10.0
            while len(calls) < 5:
                assert time.monotonic() < deadline, calls
                await asyncio.sleep(0.01)
            await asyncio.to_thread(sc.loop.stop)

    run(main())
    assert calls[:3] == [1, 2, 3]  # each after its failed tick; the loop went on
