"""The agent's HTTP control API in process (httpx on the ASGI app): evict, pin/unpin,
inventory, telemetry, health, OpenAPI, body limits; and no route ever returns block bytes."""

from __future__ import annotations

import base64

from kvcast.serving.agent import BlockState, HostBuffer, checksum


def _block(data: bytes) -> tuple[HostBuffer, int]:
    buf = HostBuffer.from_bytes(data)
    return buf, checksum(buf.view())


def test_no_get_route_ever_returns_block_bytes(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            secret = b"TOP-SECRET-KV-CONTENT-0123456789" * 4
            control.agent.store.put("t", 1, *_block(secret))
            control.agent.store.pin("t", 1)
            schema = (await api.get("/openapi.json")).json()
            paths = [p for p, ops in schema["paths"].items() if "get" in ops]
            assert {"/v1/inventory", "/v1/telemetry", "/metrics"} <= set(paths)
            paths += ["/openapi.json", "/docs"]
            window = secret[:24]
            encodings = [window, window.hex().encode(), base64.b64encode(window)]
            for path in paths:
                if "{" in path:
                    continue
                body = (await api.get(path)).content
                assert not any(e in body for e in encodings), path
            inventory = (await api.get("/v1/inventory")).json()
            assert set(inventory["blocks"][0]) == {
                "tenant", "block_hash", "state", "nbytes", "checksum", "pins", "ttl_remaining_s",
                "holds", "claims",
            }  # fmt: skip

    run(scenario())


def test_evict_and_pin_touch_only_the_named_tenants_blocks(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            store = control.agent.store
            store.put("alice", 7, *_block(b"a" * 64))
            store.put("bob", 7, *_block(b"b" * 64))
            r = (await api.post("/v1/pin", json={"tenant": "alice", "block_hashes": [7]})).json()
            assert [b["tenant"] for b in r["blocks"]] == ["alice"] and r["blocks"][0]["pins"] == 1
            assert store.info("bob", 7).state is BlockState.CACHED
            r = (await api.post("/v1/evict", json={"tenant": "bob", "block_hashes": [7]})).json()
            assert r == {"evicted": [7], "absent": [], "pinned": [], "held": []}
            assert store.info("alice", 7) is not None and store.info("bob", 7) is None
            r = (await api.post("/v1/evict", json={"tenant": "alice", "block_hashes": [7]})).json()
            assert r["pinned"] == [7] and store.info("alice", 7).state is BlockState.ACTIVE
            r = (await api.post("/v1/pin", json={"tenant": "bob", "block_hashes": [7]})).json()
            assert r["absent"] == [7] and r["blocks"] == []
            body = {"tenant": "alice", "block_hashes": [7]}
            r = (await api.post("/v1/unpin", json=body)).json()
            assert r["blocks"][0]["state"] == "cached"
            assert (await api.post("/v1/unpin", json=body)).json()["not_pinned"] == [7]
            bob = (await api.get("/v1/inventory", params={"tenant": "bob"})).json()
            assert bob["blocks"] == []

    run(scenario())


def test_retried_pin_with_the_same_command_id_pins_once_and_a_reused_id_is_409(
    run, control_api
) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            control.agent.store.put("t", 1, *_block(b"x" * 10))
            body = {"command_id": "pin-1", "tenant": "t", "block_hashes": [1, 1]}
            for _ in range(3):
                assert (await api.post("/v1/pin", json=body)).status_code == 200
            assert control.agent.store.info("t", 1).pins == 1
            other = body | {"block_hashes": [2]}
            r = await api.post("/v1/pin", json=other)
            assert r.status_code == 409 and "pin-1" in r.json()["detail"]
            # the same id for another kind of command is another command
            assert (await api.post("/v1/unpin", json=body)).status_code == 200
            assert control.agent.store.info("t", 1).pins == 0

    run(scenario())


def test_telemetry_sums_engine_queue_depths_and_metrics_agree(run, metric, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, _):
            assert (await api.get("/v1/telemetry")).json()["queue_depth"] is None
            for engine, depth in (("e1", 5), ("e2", 3), ("e1", 4)):
                body = {"engine_id": engine, "queue_depth": depth, "kv_usage": 0.5}
                assert (await api.post("/v1/engine-stats", json=body)).status_code == 204
            telemetry = (await api.get("/v1/telemetry")).json()
            assert telemetry["queue_depth"] == 7 and len(telemetry["engines"]) == 2
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_engine_queue_depth") == 7
            bad = await api.post("/v1/engine-stats", json={"queue_depth": -1})
            assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "body.queue_depth"

    run(scenario())


def test_health_is_ok_and_readiness_drops_when_shutting_down(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            assert (await api.get("/healthz")).json()["status"] == "ok"
            ready = await api.get("/readyz")
            assert ready.status_code == 200 and ready.json()["transfer_address"]
            control.accepting = False
            assert (await api.get("/readyz")).status_code == 503

    run(scenario())


def test_openapi_schema_documents_every_route_and_bearer_auth(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, _):
            schema = (await api.get("/openapi.json")).json()
            assert {
                "/v1/replicate", "/v1/evict", "/v1/pin", "/v1/unpin", "/v1/hold", "/v1/release",
                "/v1/inventory", "/v1/telemetry", "/v1/engine-stats", "/healthz", "/readyz",
                "/metrics",
            } <= set(schema["paths"])  # fmt: skip
            replicate = schema["paths"]["/v1/replicate"]["post"]
            assert replicate["security"] == [{"HTTPBearer": []}]
            assert {"401", "409", "422"} <= set(replicate["responses"])
            assert "security" not in schema["paths"]["/healthz"]["get"]
            # every guarded route: 403 and 429 are a tenant token's (a route it may not use;
            # over its rate, with Retry-After), and the scheme says what each token may reach
            for path, item in schema["paths"].items():
                for op in item.values():
                    if op.get("security"):
                        assert {"401", "403", "429"} <= set(op["responses"]), path
                        assert "Retry-After" in op["responses"]["429"]["headers"], path
            scheme = schema["components"]["securitySchemes"]["HTTPBearer"]["description"]
            assert "tenant token" in scheme and "403" in scheme and "429" in scheme

    run(scenario())


def test_oversized_or_undeclared_bodies_are_refused_before_reading(
    run, metric, control_api
) -> None:
    from kvcast.serving.agent.api import MAX_BODY_BYTES

    async def chunks():
        yield b'{"tenant": "t", '
        yield b'"block_hashes": [1]}'

    async def scenario() -> None:
        async with control_api() as (api, _):
            headers = {"content-type": "application/json"}
            big = b" " * (MAX_BODY_BYTES + 1)
            r = await api.post("/v1/evict", content=big, headers=headers)
            assert r.status_code == 413
            r = await api.post("/v1/evict", content=chunks(), headers=headers)
            assert r.status_code == 411
            text = (await api.get("/metrics")).text
            reason = {"command": "evict", "reason": "too_large"}
            assert metric(text, "kvcast_agent_commands_refused_total", **reason) == 1

    run(scenario())


def test_telemetry_counts_removals_and_the_removals_route_lists_them(run, control_api) -> None:
    import asyncio

    async def scenario() -> None:
        async with control_api() as (api, control):
            store = control.agent.store
            assert (await api.get("/v1/telemetry")).json()["removals_next"] == 0
            buf, crc = _block(b"r" * 64)
            store.put("alice", 9, buf, crc, BlockState.SPECULATIVE, ttl_s=0.01)
            store.put("bob", 5, *_block(b"c" * 64))
            await api.post("/v1/evict", json={"tenant": "bob", "block_hashes": [5]})
            await asyncio.sleep(0.05)
            assert (await api.get("/v1/telemetry")).json()["removals_next"] == 1
            r = (await api.get("/v1/removals", params={"since": 0})).json()
            assert r["blocks"] == [
                {"seq": 0, "tenant": "alice", "block_hash": 9, "reason": "expired"}
            ]
            assert r["next"] == 1 and r["missed"] == 0
            assert (await api.get("/v1/removals", params={"since": 1})).json()["blocks"] == []
            assert (await api.get("/v1/removals", params={"since": -1})).status_code == 422

    run(scenario())


def test_telemetry_names_the_agents_incarnation_new_at_each_start(run, control_api) -> None:
    """The same id for every answer of one life; another for the next life (a restart)."""

    async def scenario() -> set[str]:
        async with control_api() as (api, _control):
            ids = {(await api.get("/v1/telemetry")).json()["incarnation"] for _ in range(3)}
        assert len(ids) == 1 and len(next(iter(ids))) == 32
        return ids

    assert run(scenario()) != run(scenario())


def test_a_wrong_json_type_is_a_422_never_converted(run, control_api) -> None:
    """``"queue_depth": true`` was read as 1 and ``"deadline_s": "5"`` as 5.0."""

    async def scenario() -> None:
        async with control_api() as (api, control):
            r = await api.post("/v1/engine-stats", json={"queue_depth": True})
            assert r.status_code == 422 and "body.queue_depth" in r.json()["error"], r.text
            r = await api.post("/v1/engine-stats", json={"queue_depth": "3"})
            assert r.status_code == 422 and "body.queue_depth" in r.json()["error"], r.text
            assert control.telemetry().queue_depth is None
            pull = {"command_id": "c", "source": "127.0.0.1:1", "tenant": "t",
                    "block_hashes": [1], "deadline_s": "5"}  # fmt: skip
            r = await api.post("/v1/replicate", json=pull)
            assert r.status_code == 422 and "body.deadline_s" in r.json()["error"], r.text
            r = await api.post("/v1/engine-stats", json={"queue_depth": 3, "kv_usage": 1})
            assert r.status_code == 204, r.text  # an integer serves for a float

    run(scenario())


def test_hold_and_release_touch_only_the_named_tenants_replicas(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            store = control.agent.store
            store.put("alice", 7, *_block(b"a" * 64), state=BlockState.SPECULATIVE)
            store.put("bob", 7, *_block(b"b" * 64), state=BlockState.SPECULATIVE)
            hold = {"claim_id": "r-1", "tenant": "alice", "block_hashes": [7, 8], "hold_s": 30.0}
            r = (await api.post("/v1/hold", json=hold)).json()
            assert r == {"held": [7], "not_speculative": [8]}
            assert store.info("alice", 7).holds == 1 and store.info("bob", 7).holds == 0
            r = (await api.post("/v1/evict", json={"tenant": "alice", "block_hashes": [7]})).json()
            assert r["held"] == [7] and store.info("alice", 7) is not None
            release = {"claim_id": "r-1", "tenant": "bob", "block_hashes": [7]}
            assert (await api.post("/v1/release", json=release)).json()["not_held"] == [7]
            release["tenant"] = "alice"
            assert (await api.post("/v1/release", json=release)).json()["released"] == [7]
            assert store.info("alice", 7).holds == 0
            bad = hold | {"hold_s": 0}
            assert (await api.post("/v1/hold", json=bad)).status_code == 422

    run(scenario())


def test_the_inventory_lists_each_replicas_holds_with_the_seconds_they_have_left(
    run, control_api
) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            store = control.agent.store
            store.put("alice", 7, *_block(b"a" * 64), state=BlockState.SPECULATIVE)
            store.put("alice", 8, *_block(b"c" * 64), state=BlockState.SPECULATIVE)
            hold = {"claim_id": "r-1", "tenant": "alice", "block_hashes": [7], "hold_s": 30.0}
            assert (await api.post("/v1/hold", json=hold)).status_code == 200
            hold |= {"claim_id": "r-2", "hold_s": 5.0}
            assert (await api.post("/v1/hold", json=hold)).status_code == 200
            blocks = (await api.get("/v1/inventory")).json()["blocks"]
            by_hash = {b["block_hash"]: b for b in blocks}
            held, free = by_hash[7], by_hash[8]
            assert held["holds"] == 2 and free["holds"] == 0 and free["claims"] == []
            left = {c["claim_id"]: c["seconds_left"] for c in held["claims"]}
            assert sorted(left) == ["r-1", "r-2"]
            assert 29.0 < left["r-1"] <= 30.0 and 4.0 < left["r-2"] <= 5.0
            release = {"claim_id": "r-1", "tenant": "alice", "block_hashes": [7]}
            assert (await api.post("/v1/release", json=release)).status_code == 200
            blocks = (await api.get("/v1/inventory", params={"tenant": "alice"})).json()["blocks"]
            assert [c["claim_id"] for b in blocks for c in b["claims"]] == ["r-2"]

    run(scenario())
