"""The sidecar's configuration for a local cluster, generated and written into the workdir.

``sidecar.yaml`` lists the nodes in order with their agents' URLs and their engines' ZMQ
endpoints (PUB and replay), the block size the replay stores, a fast tick and a decision log
in the workdir; with ``cluster up --tls``, a ``tls:`` section that serves the sidecar's API
over mutual TLS with its certificate of the cluster CA. ``decider.yaml`` is the decider's
defaults with two loopback adjustments: agents hold megabytes, not the tens of GiB of a GPU,
so no HBM safety margin is kept and the speculative share of a node follows the agents' own
quota. Both files are validated by loading them back through the sidecar's and the decider's
own configs before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvcast.serving.cluster.ports import LOOPBACK
from kvcast.serving.tls import TlsFiles

SIDECAR_FILE, DECIDER_FILE, DECISION_LOG = "sidecar.yaml", "decider.yaml", "decisions.parquet"


def node_name(i: int) -> str:
    return f"gpu-node-{i}"


def decider_data(quota_fraction: float) -> dict[str, Any]:
    """Decider overrides for agents that hold megabytes (every other key: the defaults)."""
    return {
        "costs": {"safety_margin_gib": 0.0},
        "budgets": {"speculative_quota_fraction": round(quota_fraction, 6)},
    }


def sidecar_data(
    *,
    agents: list[str],
    engines: list[tuple[str, str]],
    mode: str,
    model: str,
    block_bytes: int,
    workdir: Path,
    tick_ms: float = 250.0,
    tls: TlsFiles | None = None,
) -> dict[str, Any]:
    """The sidecar config: node i has agent ``agents[i]`` and engine (PUB, replay)
    ``engines[i]``; with ``tls`` (the sidecar's certificate, key and the cluster CA), its API
    is served over mutual TLS."""
    if len(agents) != len(engines):
        raise ValueError("one engine endpoint pair per agent")
    nodes = [
        {"name": node_name(i), "agent": agent, "engine": pub, "replay": replay}
        for i, (agent, (pub, replay)) in enumerate(zip(agents, engines, strict=True))
    ]
    api_tls = None
    if tls is not None:
        api_tls = {"cert": str(tls.cert), "key": str(tls.key), "client_ca": str(tls.ca)}
    return {
        "sidecar_id": "sidecar-local",
        "listen": f"{LOOPBACK}:0",
        "tls": api_tls,
        "mode": mode,
        "model": model,
        "decider": str(workdir / DECIDER_FILE),
        "block_bytes": block_bytes,
        "nodes": nodes,
        "tick_ms": tick_ms,
        "agents": {"telemetry_period_s": 0.5, "timeout_s": 5.0},
        "decision_log": {"path": str(workdir / DECISION_LOG), "flush_s": 1.0},
        "shutdown_grace_s": 3.0,
    }


def write_configs(workdir: Path, sidecar: dict[str, Any], decider: dict[str, Any]) -> Path:
    """Write (and validate) ``decider.yaml`` and ``sidecar.yaml``; the sidecar file's path."""
    from kvcast.config import load_config
    from kvcast.predictor.decider_config import DeciderConfig
    from kvcast.serving.sidecar.config import SidecarConfig

    workdir.mkdir(parents=True, exist_ok=True)
    decider_path, sidecar_path = workdir / DECIDER_FILE, workdir / SIDECAR_FILE
    head = "# written by `kvcast cluster up`; rewritten at every start\n"
    decider_path.write_text(head + yaml.safe_dump(decider, sort_keys=False))
    sidecar_path.write_text(head + yaml.safe_dump(sidecar, sort_keys=False))
    load_config(DeciderConfig, decider_path)
    load_config(SidecarConfig, sidecar_path)
    return sidecar_path


def feature_spec(sidecar_path: Path) -> Any:
    """The feature spec the sidecar started on ``sidecar_path`` will score with."""
    from kvcast.config import load_config
    from kvcast.features.spec import build_spec
    from kvcast.serving.sidecar.config import SidecarConfig

    return build_spec(load_config(SidecarConfig, sidecar_path).feature_config)
