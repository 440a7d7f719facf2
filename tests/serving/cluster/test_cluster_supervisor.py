"""Supervision: a child is ready at its ready line, stopped by SIGTERM (SIGKILL when it
ignores it) and always reaped; one that dies first is reported with its last lines; a killed
supervisor takes its children with it. A real local cluster (one agent and the sidecar)
starts, writes its addresses and stops with every process exiting 0 and none left; a model
the sidecar would refuse stops the start before any process runs. A process is named only
the token variables that are set (it refuses an option naming an unset one)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from onnx_models import write_recency_model

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.cluster.layout import CLUSTER_FILE, ClusterLayout, NodeAddresses, read_layout
from kvcast.serving.cluster.ports import ephemeral_range, reserved_candidates
from kvcast.serving.cluster.process import ServiceFailed, ServiceProcess
from kvcast.serving.cluster.supervisor import ClusterSpec, LocalCluster, token_options

READY = re.compile(r"child ready (\d+)")
SERVE = "print('child ready', os.getpid(), flush=True)\ntime.sleep(60)"


def _child(tmp_path: Path, body: str) -> ServiceProcess:
    code = f"import os, signal, sys, time\n{body}"
    return ServiceProcess("child", [sys.executable, "-c", code], env=dict(os.environ),
                          log_path=tmp_path / "logs" / "child.log", ready=READY)  # fmt: skip


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(") ")[1].startswith("Z"):
            return True  # a zombie: dead, waiting for init to reap it
        time.sleep(0.05)
    return False


def test_a_child_is_ready_at_its_line_and_stops_on_sigterm(tmp_path: Path) -> None:
    child = _child(tmp_path, f"signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n{SERVE}")
    child.start()
    assert child.wait_ready(10.0).group(1) == str(child.pid)
    assert child.returncode() is None
    assert child.stop(5.0) == 0 and child.returncode() == 0
    assert "child ready" in (tmp_path / "logs" / "child.log").read_text()


def test_a_child_that_ignores_sigterm_is_killed_and_reaped(tmp_path: Path) -> None:
    child = _child(tmp_path, f"signal.signal(signal.SIGTERM, signal.SIG_IGN)\n{SERVE}")
    child.start()
    child.wait_ready(10.0)
    t0 = time.monotonic()
    assert child.stop(0.5) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5.0 and _gone(child.pid, 0.1)


def test_a_child_that_dies_before_it_is_ready_is_reported_with_its_last_lines(
    tmp_path: Path,
) -> None:
    child = _child(tmp_path, "print('error: no such model', flush=True)\nsys.exit(2)")
    child.start()
    with pytest.raises(ServiceFailed, match=r"child exited with status 2 before it was ready"):
        child.wait_ready(10.0)
    assert "error: no such model" in str(child.failure("x"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_supervisor_leaves_no_orphan(tmp_path: Path) -> None:
    supervisor = f"""
import os, re, sys, time
from pathlib import Path
from kvcast.serving.cluster.ports import ephemeral_range, reserved_candidates
from kvcast.serving.cluster.process import ServiceProcess
child = ServiceProcess("child", [sys.executable, "-c",
    "import os, time; print('child ready', os.getpid(), flush=True); time.sleep(60)"],
    env=dict(os.environ), log_path=Path({str(tmp_path / "child.log")!r}),
    ready=re.compile(r"child ready (\\d+)"))
child.start()
print(child.wait_ready(10.0).group(1), flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", supervisor], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert not _gone(pid, 0.2)
        proc.kill()  # no chance to stop its child: the kernel does
        proc.wait(10)
        assert _gone(pid), f"child {pid} outlived its killed supervisor"
    finally:
        proc.kill()


def _health(cluster: LocalCluster, base: str) -> dict:
    """``GET /healthz``; on failure, every process's status and last lines (for a flake)."""
    try:
        return httpx.get(f"{base}/healthz", timeout=10.0).json()
    except httpx.HTTPError as err:
        lines = [
            f"{p.name}: status {p.returncode()}\n" + "\n".join(p.tail) for p in cluster.services
        ]
        raise AssertionError(f"{base}: {err!r}\n" + "\n".join(lines)) from err


def test_a_local_cluster_starts_writes_its_addresses_and_stops_cleanly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    model = write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))
    cluster = LocalCluster(ClusterSpec(model=str(model), agents=1, workdir=tmp_path / "ok"), env)
    with cluster as layout:
        assert read_layout(tmp_path / "ok") == layout and layout.token_env is None
        (node,) = layout.nodes
        assert node.agent.startswith("http://127.0.0.1:") and node.transfer.startswith("127.")
        assert node.engine and node.engine.startswith("tcp://127.0.0.1:")
        low, high = ephemeral_range()  # the engines' ports: no port-0 bind can be given them
        engine_ports = [int(e.rsplit(":", 1)[1]) for e in (node.engine, node.replay)]
        if reserved_candidates((low, high)):
            assert all(not low <= p <= high for p in engine_ports), engine_ports
        sidecar_yaml = yaml.safe_load((tmp_path / "ok" / "sidecar.yaml").read_text())
        assert sidecar_yaml["nodes"][0]["agent"] == node.agent  # the port the agent bound
        assert "--listen 127.0.0.1:0" in " ".join(cluster.agents[0].args)
        assert "--token-env" not in cluster.agents[0].args  # none set: no token, none named
        assert _health(cluster, layout.sidecar)["sidecar_id"] == "sidecar-local"
        assert _health(cluster, node.agent)["node_id"] == "gpu-node-0"
        assert set(layout.pids) == {"sidecar", "gpu-node-0"} and cluster.exited() is None
    assert cluster.stop() == {"sidecar": 0, "gpu-node-0": 0}
    assert not (tmp_path / "ok" / CLUSTER_FILE).exists()
    assert all(_gone(pid) for pid in layout.pids.values())
    assert "sidecar sidecar-local stopped" in (tmp_path / "ok/logs/sidecar.log").read_text()


def test_a_model_the_sidecar_would_refuse_stops_the_start_before_any_process(
    tmp_path: Path,
) -> None:
    spec = build_spec(FeatureConfig(queue_windows_ms=(5000.0,)))
    wrong = write_recency_model(tmp_path / "wrong.onnx", spec)
    cluster = LocalCluster(ClusterSpec(model=str(wrong), agents=2, workdir=tmp_path / "bad"))
    with pytest.raises(ValueError, match="feature spec differs"):
        cluster.start()
    assert cluster.services == [] and not (tmp_path / "bad" / CLUSTER_FILE).exists()
    (tmp_path / "junk.onnx").write_bytes(b"not onnx")
    junk = LocalCluster(ClusterSpec(model=str(tmp_path / "junk.onnx"), workdir=tmp_path / "j"))
    with pytest.raises(ValueError, match=r"junk\.onnx"):
        junk.start()


def test_a_workdir_whose_cluster_still_runs_is_refused(tmp_path: Path) -> None:
    node = NodeAddresses("gpu-node-0", "http://127.0.0.1:1", "127.0.0.1:2")
    ClusterLayout("http://127.0.0.1:3", (node,), pids={"sidecar": os.getpid()}).write(tmp_path)
    cluster = LocalCluster(ClusterSpec(model="m.onnx", workdir=tmp_path))
    with pytest.raises(ValueError, match=r"a cluster runs in .* already: sidecar \(\d+\)"):
        cluster.start()
    assert cluster.services == [] and (tmp_path / CLUSTER_FILE).exists()


def test_a_workdir_whose_cluster_is_still_starting_is_refused(tmp_path: Path) -> None:
    first = LocalCluster(ClusterSpec(model="m.onnx", workdir=tmp_path))
    first.lock_workdir()  # what start() takes first, before any process or cluster.json
    second = LocalCluster(ClusterSpec(model="m.onnx", workdir=tmp_path))
    with pytest.raises(ValueError, match="a cluster is starting or runs in"):
        second.start()
    assert second.services == []
    first.stop()  # releases it
    third = LocalCluster(ClusterSpec(model="m.onnx", workdir=tmp_path))
    third.lock_workdir()
    third.stop()


@pytest.mark.parametrize(
    ("line", "tls", "wrong"),
    [
        ("agent a ready: http=https://h:1 transfer=h:2 blocks=0 auth=on tls=mutual device=cpu",
         True, ""),
        ("sidecar s ready: http=https://h:1 mode=shadow api_tls=mutual agent_tls=mutual",
         True, ""),
        ("sidecar s ready: http=https://h:1 mode=shadow api_tls=on agent_tls=mutual",
         True, "without"),  # the API serves TLS but takes any client
        ("sidecar s ready: http=http://h:1 mode=shadow api_tls=off agent_tls=mutual",
         True, "without"),  # the agents' side alone
        ("agent a ready: http=http://h:1 transfer=h:2 blocks=0 auth=off device=cpu",
         True, "without"),  # an older process that says nothing of TLS
        ("sidecar s ready: http=http://h:1 mode=shadow api_tls=off agent_tls=off", False, ""),
        ("sidecar s ready: http=http://h:1 mode=shadow api_tls=off agent_tls=mutual",
         False, "KVCAST_TLS_*"),  # picked up from our environment without --tls
    ],
)  # fmt: skip
def test_a_ready_line_matches_the_clusters_tls_only_when_every_side_is_mutual(
    line: str, tls: bool, wrong: str
) -> None:
    from kvcast.serving.cluster.supervisor import tls_mismatch

    got = tls_mismatch(line, tls)
    assert (wrong in got and got != "") if wrong else got == ""


def test_a_process_is_named_only_the_token_variables_that_are_set() -> None:
    """A variable unset is named to no process, and the process's default variable for that
    token is kept from it: it has no such token, as the cluster."""
    spec = ClusterSpec(model="m.onnx", token_env="KT_PROD", ingest_token_env="KT_REPORTS")
    env = {"KT_PROD": "p", "KVCAST_INGEST_TOKEN": "stray", "PATH": "/bin"}
    options, child = token_options(spec, env)
    assert options == ["--token-env", "KT_PROD"] and child == {"KT_PROD": "p", "PATH": "/bin"}
    both = {"KVCAST_TOKEN": "s", "KVCAST_INGEST_TOKEN": "i"}
    options, child = token_options(ClusterSpec(model="m.onnx"), both)
    assert options == ["--token-env", "KVCAST_TOKEN", "--ingest-token-env", "KVCAST_INGEST_TOKEN"]
    assert child == both
    assert token_options(ClusterSpec(model="m.onnx"), {"PATH": "/bin"}) == ([], {"PATH": "/bin"})
    # a default variable that is the other token's named one is kept: that token is in it
    crossed = ClusterSpec(model="m.onnx", token_env="KVCAST_INGEST_TOKEN", ingest_token_env="KT_X")
    options, child = token_options(crossed, {"KVCAST_INGEST_TOKEN": "s", "PATH": "/bin"})
    assert options == ["--token-env", "KVCAST_INGEST_TOKEN"] and child["KVCAST_INGEST_TOKEN"] == "s"
