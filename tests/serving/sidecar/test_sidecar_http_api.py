"""The sidecar's HTTP API against its ASGI app: the token guards every POST and only POSTs,
422s name the bad field, posted events reach the feature state and the block-location
endpoint, decisions come back with their cost terms, /v1/model names the registry version of a
models:/ source, and /metrics and /readyz report."""

from __future__ import annotations

import asyncio

from onnx_models import register_model, write_recency_model
from sidecar_harness import (
    AUTH,
    TOKEN,
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    telemetry,
    tick,
)

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.cluster.summary import parse_metrics


def test_every_post_block_lookup_and_the_model_need_the_token_the_other_gets_stay_open(
    tmp_path, run
) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, token=TOKEN)) as (sc, client):
            assert (await client.post("/v1/mode", json={"mode": "active"})).status_code == 401
            assert sc.mode == "shadow"
            r = await client.post("/v1/mode", json={"mode": "active"}, headers=AUTH)
            assert r.status_code == 200 and r.json() == {"mode": "active"}
            assert (await client.get("/v1/mode")).json() == {"mode": "active"}
            bad = {"Authorization": "Bearer wrong"}
            assert (
                await client.post("/v1/model", json={"source": "x"}, headers=bad)
            ).status_code == 401
            batch = {"requests": [{"request_id": "r", "node": 0, "tenant": "t",
                                   "block_hashes": [1], "input_tokens": 10}]}  # fmt: skip
            assert (await client.post("/v1/requests", json=batch)).status_code == 401
            kv = {"node": 0, "events": [{"type": "AllBlocksCleared"}]}
            assert (await client.post("/v1/kv-events", json=kv)).status_code == 401
            for path in ("/v1/mode", "/healthz", "/metrics"):
                assert (await client.get(path)).status_code == 200, path
            # the model's source is a path on the sidecar's host or a registry URI
            assert (await client.get("/v1/model")).status_code == 401
            assert (await client.get("/v1/model", headers=AUTH)).status_code == 200
            # which tenant's blocks are where (as an agent's inventory): not for anyone
            lookups = ("/v1/decisions", "/v1/decisions?kind=replicate", "/v1/blocks/7",
                       "/v1/blocks/0x00ff", "/v1/blocks/not-a-hash")  # fmt: skip
            for path in lookups:
                for headers in ({}, bad, {"Authorization": TOKEN}):
                    r = await client.get(path, headers=headers)
                    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert (await client.get("/v1/decisions", headers=AUTH)).status_code == 200
            assert (await client.get("/v1/blocks/7", headers=AUTH)).status_code == 404
            assert sc.auth_failures == 5 + 3 * len(lookups)
            text = (await client.get("/metrics")).text
            assert f"kvcast_sidecar_auth_failures_total {5 + 3 * len(lookups)}.0" in text

    run(main())


def test_a_bad_body_is_a_422_that_names_the_field(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            good = {"request_id": "r", "node": "node-b", "tenant": "t", "block_hashes": [1, "ff"],
                    "input_tokens": 10}  # fmt: skip
            r = await client.post(
                "/v1/requests", json={"requests": [good, good | {"input_tokens": -1}]}
            )
            assert r.status_code == 422
            assert r.json()["detail"][0]["field"] == "body.requests.1.input_tokens"
            r = await client.post("/v1/requests", json={"requests": [good | {"node": "node-z"}]})
            assert r.status_code == 422 and "body.requests.0.node" in r.json()["error"]
            assert "unknown node" in r.json()["error"]
            r = await client.post("/v1/kv-events", json={"node": 1, "events": [{"type": "Nope"}]})
            assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith(
                "body.events.0"
            )
            r = await client.post("/v1/mode", json={"mode": "loud"})
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.mode"
            assert (await client.get("/v1/blocks/not-a-hash")).status_code == 422
            assert len(sc.queue) == 0 and sc.queue.accepted["http"] == 0  # nothing half-queued

    run(main())


def test_posted_kv_events_and_arrivals_show_where_a_block_lives(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [11, 12, "00ff"], "block_size": 16}
            cpu = {"type": "BlockStored", "block_hashes": [12], "block_size": 16, "medium": "CPU"}
            for node, events in (("node-a", [stored]), (1, [stored, cpu])):
                r = await client.post("/v1/kv-events", json={"node": node, "events": events})
                assert r.status_code == 202 and r.json()["accepted"] == len(events)
            removed = {"type": "BlockRemoved", "block_hashes": [11]}
            await client.post("/v1/kv-events", json={"node": "node-b", "events": [removed]})
            await settle(sc)
            assert (await client.get("/v1/blocks/11")).json() == {
                "block_hash": 11, "gpu": ["node-a"], "lower": [], "replicas": []
            }  # fmt: skip
            b12 = (await client.get("/v1/blocks/12")).json()
            assert (b12["gpu"], b12["lower"]) == (["node-a", "node-b"], ["node-b"])
            assert (await client.get("/v1/blocks/0x00ff")).json()["block_hash"] == 255
            assert (await client.get("/v1/blocks/99")).status_code == 404
            assert sc.keeper.applied == 4 and sc.state.counters["bad_value"] == 0

    run(main())


def test_decisions_endpoint_lists_the_replication_with_its_cost_terms(tmp_path, run, model_path):
    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path))
        async with open_sidecar(cfg) as (sc, client):
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            hashes = chain()
            await hot_chain_on_node_a(client, hashes)
            await settle(sc)
            made = await tick(sc)
            assert [d.kind for d in made] == ["replicate"]
            body = (await client.get("/v1/decisions")).json()
            assert body["total"] == 1
            (d,) = body["decisions"]
            assert (d["source"], d["target"], d["tenant"]) == ("node-a", "node-b", "acme")
            assert d["block_hashes"] == hashes and d["status"] == "shadow"
            assert d["bytes"] == len(hashes) * (256 << 10)
            terms = d["terms"]
            assert terms["p_hit"] > 0.9 and terms["net_ms"] > 0
            assert terms["p_hit"] * terms["saved_ms"] > terms["transfer_ms"]
            assert all(p > 0.9 for p in d["p_blocks"])
            assert (await client.get("/v1/decisions", params={"kind": "evict"})).json()[
                "decisions"
            ] == []
            text = (await client.get("/metrics")).text
            assert 'kvcast_sidecar_decisions_total{kind="replicate"} 1.0' in text
            assert "kvcast_sidecar_model_info{" in text and 'kind="recency-test"' in text
            assert 'registry_version=""' in text  # a file, not a registry version
            assert "kvcast_sidecar_scoring_seconds_count 1.0" in text

    run(main())


def test_readyz_needs_a_model_and_a_ticking_loop(tmp_path, run, model_path) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            r = await client.get("/readyz")
            assert r.status_code == 503 and r.json()["checks"]["model"] is False
            await client.post("/v1/model", json={"source": str(model_path)})
            sc.loop.start()
            for _ in range(100):
                if (r := await client.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert r.status_code == 200, r.json()
            assert all(r.json()["checks"].values())

    run(main())


def test_the_feature_state_keeps_at_most_max_tracked_blocks_and_counts_what_it_sheds(
    tmp_path, run
) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, max_tracked_blocks=20)) as (sc, client):
            for i in range(12):  # 12 new conversations of CHAIN_BLOCKS blocks each
                hashes = chain(100 + i)
                arrival = {
                    "request_id": f"r-{i}", "node": "node-a", "tenant": "acme",
                    "session": f"s-{i}", "block_hashes": hashes, "input_tokens": 1000,
                    "output_tokens": 8,
                }  # fmt: skip
                r = await client.post("/v1/requests", json={"requests": [arrival]}, headers=AUTH)
                assert r.status_code == 202, r.text
            await settle(sc)
            assert sc.state.blocks.max_blocks == 20
            samples = parse_metrics((await client.get("/metrics")).text)
            tracked = samples["kvcast_sidecar_tracked_blocks"]
            shed = samples["kvcast_sidecar_shed_blocks_total"]
            # the cap is checked before each arrival: at most one request's blocks above it
            assert tracked <= 20 + len(chain()) and shed >= 12 * len(chain()) - tracked
            assert shed > 0

    run(main())


def test_get_model_names_the_registry_version_of_a_models_uri(
    tmp_path, run, model_path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    spec = build_spec(FeatureConfig())
    for kind in ("reg-one", "reg-two"):
        path = write_recency_model(tmp_path / f"{kind}.onnx", spec, kind=kind)
        register_model(uri, "kvcast-reg", path)
    MlflowClient(uri, uri).set_registered_model_alias("kvcast-reg", "champion", "2")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path), token=TOKEN)
        async with open_sidecar(cfg) as (_, client):
            state = (await client.get("/v1/model", headers=AUTH)).json()
            assert state["loaded"] and state["registry_version"] is None  # a plain path
            for source, kind, version in (
                ("models:/kvcast-reg@champion", "reg-two", "2"),
                ("models:/kvcast-reg/1", "reg-one", "1"),
            ):
                r = await client.post("/v1/model", json={"source": source}, headers=AUTH)
                assert r.status_code == 200, r.text
                state = (await client.get("/v1/model", headers=AUTH)).json()
                assert state["source"] == source and state["kind"] == kind
                assert state["registry_version"] == version
            r = await client.post("/v1/model", json={"source": str(model_path)}, headers=AUTH)
            assert r.json()["registry_version"] is None

    run(main(), timeout=60.0)
