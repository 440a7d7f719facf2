"""The consumer thread packs the runs its events changed once its queue is empty (its idle
step), so that a tick's snapshot finds them packed; the rows are those of a state that packs
them at the tick. A failing idle step does not stop the consumer."""

from __future__ import annotations

import time

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.state import FeatureState
from kvcast.prefill import PrefillModel
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.recent_chains import RecentChains
from kvcast.serving.sidecar.replicas import ReplicaTracker
from kvcast.serving.sidecar.tick_input import snapshot

CFG = FeatureConfig(nodes=2, block_tokens=16, distinct_window_ms=500.0)


def _arrivals() -> list[RequestArrived]:
    return [
        RequestArrived(float(100 * i), f"r{i}", i % 2, "t", f"s{i % 3}", 48, 10,
                       (1, 2, 3) if i % 2 else (1, 2, 4 + i))
        for i in range(12)
    ]  # fmt: skip


def _keeper() -> StateKeeper:
    return StateKeeper(FeatureState(CFG), EventQueue(1000), RecentChains(60_000.0, 10, 16),
                       ReplicaTracker(), NodeLoads(2, PrefillModel(), 5.0))  # fmt: skip


def test_the_consumer_packs_changed_runs_when_its_queue_empties() -> None:
    keeper = _keeper()
    numbers = keeper.state.blocks.numbers
    keeper.start()
    try:
        keeper.queue.put(_arrivals(), "router")
        deadline = time.monotonic() + 10.0
        while (keeper.applied < 12 or numbers.changed) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.applied == 12 and not numbers.changed  # packed, no tick asked
        live = keeper.ask(lambda k: snapshot(k, 1_500.0, 0)).result(10.0)
    finally:
        keeper.stop()
    plain = _keeper()  # the same events, its runs packed by the tick's own read
    plain.apply(_arrivals())
    assert plain.state.blocks.numbers.changed
    want = snapshot(plain, 1_500.0, 0)
    assert live.blocks == want.blocks and live.rows.tobytes() == want.rows.tobytes()


def test_a_failing_idle_step_leaves_the_consumer_consuming() -> None:
    keeper = _keeper()

    def fail() -> None:
        raise RuntimeError("idle")

    keeper.idle = fail  # type: ignore[method-assign]
    keeper.start()
    try:
        keeper.queue.put(_arrivals()[:6], "router")
        deadline = time.monotonic() + 10.0
        while keeper.applied < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the idle step has failed by now
        keeper.queue.put(_arrivals()[6:], "router")
        while keeper.applied < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.applied == 12 and keeper.running
    finally:
        keeper.stop()
