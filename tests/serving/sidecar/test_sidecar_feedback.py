"""The routed requests reach the decider: it learns from them whether its copies are used
(real sidecar, HTTP arrivals through the consumer thread to the decision tick)."""

from __future__ import annotations

from sidecar_harness import (
    AUTH,
    BLOCK_TOKENS,
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    telemetry,
    tick,
)

from kvcast.serving.cluster.summary import parse_metrics


def test_the_next_tick_settles_copies_with_the_requests_routed_since(tmp_path, run, model_path):
    used, elsewhere = chain(1), chain(2)

    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path))
        async with open_sidecar(cfg) as (sc, client):
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            for hashes in (used, elsewhere):
                await hot_chain_on_node_a(client, hashes, tenant=f"t{hashes[0] >> 32}")
            await settle(sc)
            made = await tick(sc)
            assert {(d.target, d.block_hashes[-1]) for d in made} == {
                (1, used[-1]),
                (1, elsewhere[-1]),
            }
            assert len(sc.decider.feedback) == 2 and sc.decider.feedback.settled == 0
            turns = [
                {"request_id": f"r-{node}", "node": node, "tenant": f"t{h[0] >> 32}",
                 "block_hashes": [*h, 99], "input_tokens": (len(h) + 1) * BLOCK_TOKENS}
                for node, h in (("node-b", used), ("node-a", elsewhere))
            ]  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": turns}, headers=AUTH)
            assert r.status_code == 202, r.text
            await settle(sc)
            assert sc.decider.feedback.settled == 0  # not before the decision thread's tick
            await tick(sc)
            fb = sc.decider.feedback
            assert (fb.settled, fb.used, len(fb)) == (2, 1, 0)
            assert len(sc.keeper.routed) == 0  # handed over once
            samples = parse_metrics((await client.get("/metrics")).text)
            assert samples["kvcast_sidecar_decider_copies_settled_total"] == 2
            assert samples["kvcast_sidecar_decider_copies_used_total"] == 1
            assert samples["kvcast_sidecar_decider_p_factor"] == fb.last_factor < 1.0

    run(main())


def test_routed_requests_kept_between_ticks_are_bounded_newest_first() -> None:
    from kvcast.features.config import FeatureConfig
    from kvcast.features.events import RequestArrived
    from kvcast.features.online.state import FeatureState
    from kvcast.prefill import PrefillModel
    from kvcast.serving.sidecar.consumer import ROUTED_KEPT, StateKeeper
    from kvcast.serving.sidecar.event_queue import EventQueue
    from kvcast.serving.sidecar.node_loads import NodeLoads
    from kvcast.serving.sidecar.recent_chains import RecentChains
    from kvcast.serving.sidecar.replicas import ReplicaTracker

    keeper = StateKeeper(FeatureState(FeatureConfig(nodes=2, block_tokens=16)), EventQueue(10),
                         RecentChains(60_000.0, 10, 16), ReplicaTracker(),
                         NodeLoads(2, PrefillModel(), 5.0))  # fmt: skip
    n = ROUTED_KEPT + 10
    keeper.apply([RequestArrived(float(i), f"r{i}", i % 2, "t", None, 32, 1, (i, i + 1))
                  for i in range(n)])  # fmt: skip
    routed = keeper.take_routed()
    assert len(routed) == ROUTED_KEPT and routed[-1] == (float(n - 1), (n - 1) % 2, (n - 1, n))
    assert routed[0][0] == 10.0 and keeper.take_routed() == []
