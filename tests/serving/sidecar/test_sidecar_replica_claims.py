"""The sidecar's claims: a request routed to a node claims the live replicas of its tenant
there that the engine has not stored yet (active mode only); a claim keeps the replica in
view past its TTL until the engine stores the block or the claim's hold runs out; copies of
one block to one node for two tenants, on their way together, keep each tenant's claims."""

from __future__ import annotations

from sidecar_harness import AUTH, TOKEN, open_sidecar, settle, sidecar_config

from kvcast.serving.sidecar.replicas import ReplicaTracker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_routed_request_claims_only_its_tenants_unstored_replicas_on_its_node() -> None:
    t = ReplicaTracker(Clock())
    t.place(1, [10, 11, 12], "acme", 100, ttl_s=5.0)
    t.place(1, [13], "other", 100, ttl_s=5.0)
    t.place(2, [10], "acme", 100, ttl_s=5.0)
    t.on_stored(1, [12])  # the engine stored this one itself
    assert t.claim(1, "acme", [10, 11, 12, 13, 99], "r-1", hold_s=30.0) == [10, 11]
    assert t.claim(3, "acme", [10], "r-2", hold_s=30.0) == []  # routed where no replica is


def test_a_claimed_replica_outlives_its_ttl_in_view_until_its_engine_stores_it() -> None:
    clock = Clock()
    t = ReplicaTracker(clock)
    t.place(1, [10, 11], "acme", 100, ttl_s=5.0)
    t.claim(1, "acme", [10, 11], "r-1", hold_s=30.0)
    t.claim(1, "acme", [10], "r-2", hold_s=30.0)
    clock.now += 10.0
    assert t.sweep() == []  # past the TTL: both held on the agent
    released = t.on_stored(1, [10])
    assert sorted(released) == [("r-1", "acme", [10]), ("r-2", "acme", [10])]
    assert t.sweep() == []  # 10 was adopted: the engine's own events say when it leaves
    clock.now += 20.1  # 11's hold ran out (its engine never stored it)
    assert t.sweep() == [(1, 11)]


def test_a_claim_outlives_a_renewed_placement_of_its_replica() -> None:
    clock = Clock()
    t = ReplicaTracker(clock)
    t.place(1, [10], "acme", 100, ttl_s=5.0)
    t.claim(1, "acme", [10], "r-1", hold_s=30.0)
    t.place(1, [10], "acme", 100, ttl_s=5.0)  # copied there again (its agent keeps the hold)
    clock.now += 10.0
    assert t.sweep() == [] and t.on_stored(1, [10]) == [("r-1", "acme", [10])]


def test_a_replica_on_its_way_is_claimed_when_it_lands_for_what_is_left_of_its_hold() -> None:
    clock = Clock()
    t = ReplicaTracker(clock)
    t.expect(1, "acme", [10, 11, 12])
    assert t  # nothing live yet, but a request routed to node 1 may claim what is coming
    assert t.claim(1, "acme", [10, 11, 12], "r-1", hold_s=30.0) == []  # nothing to hold yet
    assert t.claim(1, "other", [10], "r-2", hold_s=30.0) == []  # another tenant's request
    t.on_stored(1, [12])  # the engine computed 12 itself meanwhile: r-1 needs it no more
    clock.now += 4.0
    t.place(1, [10, 12], "acme", 100, ttl_s=5.0)  # 11 did not land
    assert t.landed(1, "acme", [10, 11, 12]) == [("r-1", [10], 26.0)]
    assert t.landed(1, "acme", [10]) == []  # over: nothing is coming any more
    clock.now += 10.0  # past 10's TTL: held for r-1
    assert t.sweep() == [(1, 12)] and t.on_stored(1, [10]) == [("r-1", "acme", [10])]


def test_copies_of_one_block_to_one_node_for_two_tenants_keep_each_tenants_claims() -> None:
    clock = Clock()
    t = ReplicaTracker(clock)
    t.expect(1, "acme", [10])
    t.expect(1, "globex", [10])  # the same hash, another tenant's block, on its way too
    assert t.claim(1, "acme", [10], "r-a", hold_s=30.0) == []
    assert t.claim(1, "globex", [10], "r-g", hold_s=30.0) == []
    clock.now += 2.0
    t.place(1, [10], "acme", 100, ttl_s=5.0)
    assert t.landed(1, "acme", [10]) == [("r-a", [10], 28.0)]  # acme's claim survived
    t.place(1, [10], "globex", 100, ttl_s=5.0)
    assert t.landed(1, "globex", [10]) == [("r-g", [10], 28.0)]


def test_shadow_mode_claims_nothing_active_mode_asks_the_agent_to_hold(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, token=TOKEN)) as (sc, client):
            sc.replicas.place(1, [10, 11], "acme", 100, ttl_s=60.0)
            arrival = {"node": "node-b", "tenant": "acme", "block_hashes": [10, 11],
                       "input_tokens": 2 * 512 + 10}  # fmt: skip
            body = {"requests": [arrival | {"request_id": "r-shadow"}]}
            assert (await client.post("/v1/requests", json=body, headers=AUTH)).status_code == 202
            await settle(sc)
            assert not sc.executor.claims  # no hold asked for
            sc.set_mode("active")
            elsewhere = arrival | {"request_id": "r-a", "node": "node-a"}
            mine = arrival | {"request_id": "r-b"}
            body = {"requests": [elsewhere, mine]}
            assert (await client.post("/v1/requests", json=body, headers=AUTH)).status_code == 202
            await settle(sc)
            # node b has no agent here: the hold is counted as failed, the claim is kept
            assert sc.executor.claims == {"hold_failed": 2}
            # only the request routed to node b claimed them, not the one in shadow mode
            assert sc.replicas.on_stored(1, [10, 11]) == [("r-b", "acme", [10, 11])]

    run(main())
