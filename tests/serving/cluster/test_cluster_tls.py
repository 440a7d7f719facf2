"""``kvcast cluster up --tls``: a cluster CA and a certificate per process (and one for the
replay) in ``<workdir>/tls/``, keys mode 0600, the CA's key nowhere on disk; every process
speaks mutual TLS, the sidecar and the agents at ``https://`` in ``cluster.json``. End to end
with real processes on loopback: ``cluster up --tls --agents 2 --mode active``, then ``cluster
replay --cluster`` (as a process) posts arrivals to the sidecar and stores blocks into the
agents over mutual TLS and the sidecar's replications move bytes between them; a plain-HTTP
client, one without a certificate and one of another CA are refused by the sidecar and by an
agent; Ctrl-C stops every process with status 0."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import signal
import ssl
import stat
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from onnx_models import write_recency_model
from serve_processes import kvcast_command, start
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.config import load_config
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.cluster.certs import CA_FILE, make_cluster_certs
from kvcast.serving.cluster.config_gen import decider_data, sidecar_data, write_configs
from kvcast.serving.cluster.engine_http import EngineHttp
from kvcast.serving.cluster.layout import (
    ClusterLayout,
    NodeAddresses,
    ReplayTargets,
    TlsPaths,
    read_layout,
)
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.tls import ServerTls, TlsFiles

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives.serialization import Encoding  # noqa: E402

CLUSTER_READY = re.compile(r"cluster ready: sidecar=(\S+) .*tls_ca=(\S+) ")
TOKEN_ENV = "KVCAST_TLS_E2E_TOKEN"
SIZES = ["--capacity", "32MiB", "--speculative-quota", "8MiB", "--block-bytes", "16KiB"]
REFUSED = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_certs_are_one_ca_and_a_loopback_cert_per_name_with_private_keys(tmp_path: Path) -> None:
    files = make_cluster_certs(tmp_path / "tls", ["sidecar", "gpu-node-0", "replay-client"])
    names = {p.name for p in (tmp_path / "tls").iterdir()}
    assert names == {CA_FILE} | {f"{n}.{x}" for n in files for x in ("crt", "key")}
    assert _mode(tmp_path / "tls") == 0o700
    ca = x509.load_pem_x509_certificate((tmp_path / "tls" / CA_FILE).read_bytes())
    for tls in files.values():
        assert tls.ca == tmp_path / "tls" / CA_FILE and _mode(tls.key) == 0o600
        cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
        assert "localhost" in san.get_values_for_type(x509.DNSName)
        tls.server_context(), tls.client_context()  # both load: each serves and connects
    again = make_cluster_certs(tmp_path / "tls", ["sidecar"])  # a new CA every time
    assert again["sidecar"].ca.read_bytes() != ca.public_bytes(Encoding.PEM)
    with pytest.raises(ValueError, match="not a certificate name"):
        make_cluster_certs(tmp_path / "x", ["../up"])


def test_layout_records_tls_and_replay_targets_need_a_certificate_for_https(
    tmp_path: Path,
) -> None:
    node = NodeAddresses("gpu-node-0", "https://127.0.0.1:1", "127.0.0.1:2")
    paths = TlsPaths("/w/tls/ca.pem", "/w/tls/replay-client.crt", "/w/tls/replay-client.key")
    layout = ClusterLayout("http://127.0.0.1:3", (node,), tls=paths)
    layout.write(tmp_path)
    assert read_layout(tmp_path) == layout
    targets = ReplayTargets.from_layout(layout, None)
    assert targets.tls == TlsFiles(Path(paths.cert), Path(paths.key), Path(paths.ca))
    plain = ClusterLayout("http://127.0.0.1:3", (node,))
    assert "tls" not in plain.to_json()  # a plain cluster's cluster.json is unchanged
    with pytest.raises(ValueError, match="https:// agents require a client certificate"):
        ReplayTargets.from_layout(plain, None)
    with pytest.raises(ValueError, match="https needs an SSL context"):
        EngineHttp("https://127.0.0.1:1")
    help_text = " ".join(CliRunner().invoke(app, ["cluster", "up", "--help"]).output.split())
    assert "--tls" in help_text and "Mutual TLS" in help_text


def test_the_generated_sidecar_config_serves_its_api_over_mutual_tls_with_its_certificate(
    tmp_path: Path,
) -> None:
    side = make_cluster_certs(tmp_path / "tls", ["sidecar"])["sidecar"]
    args: dict[str, Any] = {
        "agents": ["https://127.0.0.1:1"], "engines": [("tcp://127.0.0.1:2", None)],
        "mode": "active", "model": "m.onnx", "block_bytes": 16384, "workdir": tmp_path,
    }  # fmt: skip
    path = write_configs(tmp_path, sidecar_data(**args, tls=side), decider_data(0.25))
    cfg = load_config(SidecarConfig, path)
    assert cfg.tls is not None
    assert cfg.tls.server_tls() == ServerTls(side.cert, side.key, client_ca=side.ca)
    plain = write_configs(tmp_path, sidecar_data(**args), decider_data(0.25))
    assert load_config(SidecarConfig, plain).tls is None  # without --tls: plain HTTP


def _refused_by(service: str, ca: Path, rogue: TlsFiles) -> None:
    """A plain-HTTP client, a TLS client without a certificate and one with a certificate of
    another CA: none gets an answer from ``service`` (an https:// URL)."""
    address = service.removeprefix("https://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{address}/healthz", timeout=5.0)
    no_cert = ssl.create_default_context(cafile=str(ca))
    stranger = ssl.create_default_context(cafile=str(ca))
    stranger.load_cert_chain(str(rogue.cert), str(rogue.key))
    for context in (no_cert, stranger):
        with pytest.raises(REFUSED), httpx.Client(verify=context, timeout=5.0) as http:
            http.get(f"{service}/healthz").raise_for_status()


def test_cluster_up_tls_replays_over_mutual_tls_and_refuses_strangers(tmp_path: Path) -> None:
    model = write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))
    token, workdir = secrets.token_hex(16), tmp_path / "cluster"
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVCAST_TOKEN", TOKEN_ENV) and not k.startswith("KVCAST_TLS_")}  # fmt: skip
    env[TOKEN_ENV] = token
    up = start(["cluster", "up", "--tls", "--agents", "2", "--mode", "active", "--model",
                str(model), "--workdir", str(workdir), "--token-env", TOKEN_ENV, *SIZES],
               env)  # fmt: skip
    try:
        ready = up.wait_ready(CLUSTER_READY, timeout_s=60.0)
        layout = read_layout(workdir)
        assert layout.tls is not None and ready.group(2) == layout.tls.ca
        assert Path(layout.tls.ca) == (workdir / "tls" / CA_FILE).resolve()
        assert all(n.agent.startswith("https://127.0.0.1:") for n in layout.nodes)
        assert layout.sidecar.startswith("https://127.0.0.1:") and ready.group(1) == layout.sidecar
        keys = sorted((workdir / "tls").glob("*.key"))
        assert [k.stem for k in keys] == ["gpu-node-0", "gpu-node-1", "replay-client", "sidecar"]
        assert all(_mode(k) == 0o600 for k in keys)
        sidecar_yaml = (workdir / "sidecar.yaml").read_text()
        assert all(n.agent in sidecar_yaml for n in layout.nodes)

        rogue = make_cluster_certs(tmp_path / "rogue", ["rogue"])["rogue"]
        _refused_by(layout.nodes[0].agent, Path(layout.tls.ca), rogue)
        _refused_by(layout.sidecar, Path(layout.tls.ca), rogue)
        client = layout.tls.files()
        with httpx.Client(verify=client.client_context(), timeout=5.0) as http:
            assert http.get(f"{layout.nodes[1].agent}/healthz").json()["node_id"] == "gpu-node-1"
            assert http.get(f"{layout.sidecar}/healthz").json()["sidecar_id"] == "sidecar-local"

        out = tmp_path / "replay.json"
        replay = subprocess.run(
            [*kvcast_command(), "cluster", "replay", "--cluster", str(workdir), "--window-s",
             "60", "--speed", "10", "--settle-s", "2", "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stdout + replay.stderr
        summary = json.loads(out.read_text())
        played, side = summary["replay"], summary["sidecar"]
        assert played["requests"] == played["arrivals_posted"] > 0
        assert played["put_failures"] == 0 and played["bytes_put"] > 0
        assert side["replications_done"] > 0, side  # the sidecar commanded them over mTLS
        assert summary["agents_bytes_pulled"] > 0  # agent to agent, over mutual TLS
        assert all(a["checksum_failures"] == 0 for a in summary["agents"])
        assert up.stop(signal.SIGINT, timeout_s=30.0) == 0, "".join(up.log)
    finally:
        up.kill()
    assert any("cluster stopped: 3 processes exited 0" in line for line in up.log), up.log
    assert not (workdir / "cluster.json").exists()
