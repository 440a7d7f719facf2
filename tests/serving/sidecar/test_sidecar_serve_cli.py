"""``kvcast serve sidecar``: a real process that logs its ready line, serves the API (token on
POSTs and block lookups), stops cleanly on SIGINT with exit status 0; bad input is one line
and exit status 2."""

from __future__ import annotations

import os
import secrets
import signal
import time

import httpx
import yaml
from onnx_models import write_recency_model
from serve_processes import SIDECAR_READY, start
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec

runner = CliRunner()


def _config(tmp_path, **extra) -> str:
    data = {
        "listen": "127.0.0.1:0",
        "nodes": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        "tick_ms": 100.0,
        "decision_log": {"path": str(tmp_path / "log.parquet")},
    } | extra
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_sidecar_process_serves_guards_posts_and_stops_cleanly(tmp_path, model_path) -> None:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    proc = start(["serve", "sidecar", "--config", _config(tmp_path), "--model", str(model_path)],
                 env)  # fmt: skip
    try:
        match = proc.wait_ready(SIDECAR_READY)
        assert match.group(1) == "sidecar-0"
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=proc.http, timeout=10.0) as http:
            assert http.get("/healthz").json() == {"status": "ok", "sidecar_id": "sidecar-0"}
            deadline = time.monotonic() + 10
            while (ready := http.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, ready.json()
                time.sleep(0.05)
            assert http.post("/v1/mode", json={"mode": "active"}).status_code == 401
            assert http.post("/v1/mode", json={"mode": "active"}, headers=auth).status_code == 200
            ev = {"type": "BlockStored", "block_hashes": [7], "block_size": 16}
            r = http.post("/v1/kv-events", json={"node": "gpu-1", "events": [ev]}, headers=auth)
            assert r.status_code == 202
            deadline = time.monotonic() + 10
            while (where := http.get("/v1/blocks/7", headers=auth)).status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert where.json()["gpu"] == ["gpu-1"]
            # where a block lives, and which tenant's chains went where: the token's too
            # and the model's source (a path on this host): the token's too
            for path in ("/v1/blocks/7", "/v1/decisions", "/v1/model"):
                assert http.get(path).status_code == 401, path
                assert http.get(path, headers={"Authorization": "Bearer x"}).status_code == 401
            assert http.get("/v1/decisions", headers=auth).status_code == 200
            assert http.get("/v1/model", headers=auth).json()["kind"] == "recency-test"
            assert "/v1/requests" in http.get("/openapi.json").json()["paths"]
        assert proc.stop(signal.SIGINT) == 0, "".join(proc.log)
    finally:
        proc.kill()
    assert any("sidecar sidecar-0 stopped" in line for line in proc.log), "".join(proc.log)
    assert not any("Traceback" in line for line in proc.log), "".join(proc.log)


def test_bad_config_and_refused_model_exit_2_with_one_line(tmp_path) -> None:
    env = {"KVCAST_TOKEN": None}
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [{name: a}]\ntick_ms: -1\n")
    r = runner.invoke(app, ["serve", "sidecar", "--config", str(bad)], env=env)
    assert r.exit_code == 2 and "key 'tick_ms'" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["serve", "sidecar", "--config", _config(tmp_path), "--mode", "loud"],
                      env=env)  # fmt: skip
    assert r.exit_code == 2 and "key 'mode'" in r.output
    spec = build_spec(FeatureConfig(queue_windows_ms=(5000.0,)))
    wrong = write_recency_model(tmp_path / "wrong.onnx", spec)
    r = runner.invoke(
        app, ["serve", "sidecar", "--config", _config(tmp_path), "--model", str(wrong)], env=env
    )
    assert r.exit_code == 2, r.output
    assert "feature spec differs" in r.output and "node_queue_slope_30s" in r.output


def test_an_engine_feed_that_cannot_start_exits_2_with_one_line(tmp_path) -> None:
    # a well-formed endpoint the config takes, that the connect refuses: a path too long
    nodes = [{"name": "gpu-0", "engine": f"ipc://{tmp_path}/{'x' * 200}"}, {"name": "gpu-1"}]
    r = runner.invoke(app, ["serve", "sidecar", "--config", _config(tmp_path, nodes=nodes)],
                      env={"KVCAST_TOKEN": None})  # fmt: skip
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if "error" in line]
    assert len(lines) == 1 and "node 'gpu-0': cannot subscribe" in lines[0], r.output
    assert "Traceback" not in r.output and "cannot join thread" not in r.output


def test_an_empty_flag_is_refused_naming_it_not_ignored(tmp_path) -> None:
    """``--listen ""`` was taken for not given: the sidecar listened on the file's address.
    (The file is bad too, so that a flag still ignored fails here rather than serves.)"""
    config = _config(tmp_path, tick_ms=-1)
    for flag in ("--listen", "--mode", "--model"):
        r = runner.invoke(app, ["serve", "sidecar", "--config", config, flag, ""],
                          env={"KVCAST_TOKEN": None})  # fmt: skip
        assert r.exit_code == 2, r.output
        assert f"{flag} must not be empty, got ''" in r.output and "Traceback" not in r.output
