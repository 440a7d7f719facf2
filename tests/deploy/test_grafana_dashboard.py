"""The Grafana dashboard (deploy/grafana): the committed JSON is what its script makes, it is a
well-formed dashboard, and every metric a panel queries is one that a running sidecar or agent
serves on ``/metrics`` (their real ASGI apps), so that no panel stays empty after a rename."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import httpx

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "grafana"
METRIC = re.compile(r"\bkvcast_[a-z0-9_]+")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kvcast_dashboard", FOLDER / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


def _served_names(text: str) -> set[str]:
    """Every sample name a scrape can hold: each family's, and a histogram's series."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


async def _scrapes(tmp_path: Path) -> tuple[str, str]:
    from kvcast.serving.agent import Agent, AgentConfig
    from kvcast.serving.agent.api import build_app as agent_app
    from kvcast.serving.agent.control import AgentControl
    from kvcast.serving.sidecar.api import build_app as sidecar_app
    from kvcast.serving.sidecar.config import SidecarConfig
    from kvcast.serving.sidecar.core import Sidecar

    cfg = SidecarConfig.model_validate({
        "listen": "127.0.0.1:0", "nodes": [{"name": "node-a"}],
        "decision_log": {"path": str(tmp_path / "decisions.parquet")},
    })  # fmt: skip
    sidecar = Sidecar(cfg)
    await sidecar.start(decisions=False)
    try:
        transport = httpx.ASGITransport(app=sidecar_app(sidecar))
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
            side = (await client.get("/metrics")).text
    finally:
        await sidecar.stop()
    async with Agent(AgentConfig(capacity_bytes=1 << 26, speculative_quota_bytes=1 << 24)) as a:
        transport = httpx.ASGITransport(app=agent_app(AgentControl(a), None))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
            agent = (await client.get("/metrics")).text
    return side, agent


def test_the_committed_dashboard_is_what_its_script_makes() -> None:
    committed = (FOLDER / "kvcast.json").read_text()
    assert committed == _script().render(), (
        "deploy/grafana/kvcast.json is stale: python deploy/grafana/dashboard.py > "
        "deploy/grafana/kvcast.json"
    )


def test_the_dashboard_is_a_grafana_dashboard_with_distinct_panels_on_one_data_source() -> None:
    board = json.loads((FOLDER / "kvcast.json").read_text())
    panels = board["panels"]
    assert board["uid"] and board["title"] and panels
    assert len({p["id"] for p in panels}) == len(panels)
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource"}
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for dx in range(g["w"]):  # no two panels overlap
            for dy in range(g["h"]):
                assert (g["x"] + dx, g["y"] + dy) not in cells, p["title"]
                cells.add((g["x"] + dx, g["y"] + dy))
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])


def test_every_metric_the_dashboard_queries_is_served_by_the_sidecar_or_an_agent(
    tmp_path: Path,
) -> None:
    side, agent = asyncio.run(_scrapes(tmp_path))
    served = _served_names(side) | _served_names(agent)
    board = json.loads((FOLDER / "kvcast.json").read_text())
    queried = {
        name
        for p in board["panels"]
        for t in p.get("targets", ())
        for name in METRIC.findall(t["expr"])
    }
    assert len(queried) > 30
    missing = sorted(queried - served)
    assert not missing, f"panels query metrics no service serves: {missing}"
