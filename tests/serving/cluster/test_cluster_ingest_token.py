"""The ingest token in a local cluster. ``cluster replay`` posts the router's arrivals, the
engines' KV events and their queue depths with it, and stores and evicts block bytes with the
shared token: against a real sidecar and agent (in this process) that know both, a replay
whose shared token is wrong still reports everything and stores nothing, one whose ingest
token is wrong stores everything and reports nothing, and one with both right does both.
``cluster up`` refuses an ingest token without a shared token before any process starts, and
hands its processes the ingest token's variable (real processes), naming it in
cluster.json."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from onnx_models import write_recency_model

from kvcast.cli.common import open_trace
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.service import AgentService
from kvcast.serving.cluster.layout import ReplayTargets, read_layout
from kvcast.serving.cluster.replay import ReplaySpec, played_trace, requests_of, run_replay
from kvcast.serving.cluster.supervisor import ClusterSpec, LocalCluster
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.service import SidecarService
from kvcast.serving.tls import ENV as TLS_ENV

SHARED, REPORTS = "cluster-shared-token", "cluster-ingest-token"


@pytest.mark.parametrize(
    ("token", "ingest", "reported", "stored"),
    [("wrong", REPORTS, True, False), (SHARED, "wrong", False, True),
     (SHARED, REPORTS, True, True)],
)  # fmt: skip
def test_the_replay_reports_with_the_ingest_token_and_stores_with_the_shared_one(
    run_async, token: str, ingest: str, reported: bool, stored: bool
) -> None:
    trace = open_trace("bundled:conversation")
    spec = ReplaySpec(window_s=10.0, speed=10.0, block_bytes=16 << 10)
    requests = requests_of(played_trace(trace, spec))

    async def main() -> tuple[dict, dict]:
        acfg = AgentConfig(node_id="a", capacity_bytes=64 << 20, speculative_quota_bytes=16 << 20,
                           token=SHARED, ingest_token=REPORTS)  # fmt: skip
        agent = AgentService(acfg)
        http_address, _ = await agent.start()
        cfg = SidecarConfig.model_validate({
            "listen": "127.0.0.1:0", "nodes": [{"name": "a"}], "token": SHARED,
            "ingest_token": REPORTS, "block_bytes": spec.block_bytes,
            "decision_log": {"path": None},
        })  # fmt: skip
        sidecar = SidecarService(cfg)
        try:
            url = await sidecar.start()
            targets = ReplayTargets(f"http://{url}", (f"http://{http_address}",), ("a",),
                                    token=token, ingest_token=ingest)  # fmt: skip
            stats = await run_replay(requests, targets, spec, trace.block_size)
            async with httpx.AsyncClient() as http:
                telemetry = (await http.get(f"http://{http_address}/v1/telemetry")).json()
            assert sidecar.sidecar.ingest_refusals == agent.control.ingest_refusals == 0
            return stats, telemetry
        finally:
            await sidecar.stop()
            await agent.stop()

    stats, telemetry = run_async(main(), timeout=60.0)
    n = stats["requests"]
    assert n == len(requests) > 5
    assert (stats["arrivals_posted"], stats["arrival_failures"]) == ((n, 0) if reported else (0, n))
    assert (telemetry["queue_depth"] is not None) is reported  # the engines' reports
    if stored:
        assert stats["blocks_put"] > 0 and stats["put_failures"] == 0
    else:
        assert stats["blocks_put"] == 0 and stats["put_failures"] > 0
    # KV events announce the blocks that landed, with the ingest token
    assert (stats["events_published"] > 0) is (reported and stored)


def _env(**tokens: str) -> dict[str, str]:
    drop = {"KVCAST_TOKEN", "KVCAST_INGEST_TOKEN", *TLS_ENV.values()}
    return {k: v for k, v in os.environ.items() if k not in drop} | tokens


def test_cluster_up_refuses_an_ingest_token_without_a_shared_one_before_any_process(
    tmp_path: Path,
) -> None:
    model = write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))
    spec = ClusterSpec(model=str(model), agents=1, workdir=tmp_path / "c")
    for env, message in (
        (_env(KVCAST_INGEST_TOKEN=REPORTS), "KVCAST_INGEST_TOKEN is set but KVCAST_TOKEN is not"),
        (_env(KVCAST_TOKEN=SHARED, KVCAST_INGEST_TOKEN=SHARED),
         "KVCAST_INGEST_TOKEN is the same as KVCAST_TOKEN"),
    ):  # fmt: skip
        cluster = LocalCluster(spec, env)
        with pytest.raises(ValueError, match=message):
            cluster.start()
        assert cluster.services == []


def test_cluster_up_hands_its_processes_the_ingest_token(tmp_path: Path) -> None:
    model = write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))
    spec = ClusterSpec(model=str(model), agents=1, workdir=tmp_path / "c")
    cluster = LocalCluster(spec, _env(KVCAST_TOKEN=SHARED, KVCAST_INGEST_TOKEN=REPORTS))
    mine = {"Authorization": f"Bearer {REPORTS}"}
    with cluster as layout, httpx.Client(timeout=10.0) as http:
        assert read_layout(tmp_path / "c") == layout
        assert layout.token_env == "KVCAST_TOKEN"
        assert layout.ingest_token_env == "KVCAST_INGEST_TOKEN"
        (node,) = layout.nodes
        r = http.post(f"{node.agent}/v1/engine-stats", json={"queue_depth": 2}, headers=mine)
        assert r.status_code == 204, r.text
        r = http.post(f"{node.agent}/v1/pin", json={"tenant": "t", "block_hashes": [1]},
                      headers=mine)  # fmt: skip
        assert r.status_code == 403, r.text
        arrival = {"request_id": "r", "node": node.name, "tenant": "t", "block_hashes": [1],
                   "input_tokens": 16}  # fmt: skip
        r = http.post(f"{layout.sidecar}/v1/requests", json={"requests": [arrival]}, headers=mine)
        assert r.status_code == 202, r.text
        r = http.post(f"{layout.sidecar}/v1/mode", json={"mode": "active"}, headers=mine)
        assert r.status_code == 403, r.text
    assert set(cluster.stop().values()) == {0}
