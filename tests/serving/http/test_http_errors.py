"""The shared error handlers: a body that is not parseable is a 422 naming ``body`` (not
FastAPI's bare 400), a bad path parameter a 422 naming it, and a 405 lists every method of
the path, even when its routes sit in different routers."""

from __future__ import annotations

import asyncio

import httpx

from kvcast.serving.sidecar.api import build_app
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.core import Sidecar


async def _answers() -> list[httpx.Response]:
    cfg = SidecarConfig.model_validate({"nodes": [{"name": "a"}], "decision_log": {"path": None}})
    transport = httpx.ASGITransport(app=build_app(Sidecar(cfg)))
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
        headers = {"Content-Type": "application/json"}
        return [
            await http.post("/v1/requests", content=b"\xff\xfe{", headers=headers),
            await http.get("/v1/blocks/not-a-hash"),
            await http.options("/v1/mode"),
        ]


def test_unparseable_bodies_bad_paths_and_wrong_methods_are_answered_as_documented() -> None:
    body, path, method = asyncio.run(asyncio.wait_for(_answers(), 10.0))
    assert body.status_code == 422, body.text
    assert body.json()["error"].startswith("body: ") and body.json()["detail"][0]["loc"] == ["body"]
    assert path.status_code == 422, path.text
    assert path.json()["detail"][0]["field"] == "path.block_hash"
    assert method.status_code == 405
    assert set(method.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
