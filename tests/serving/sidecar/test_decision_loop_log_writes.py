"""The decision and routes logs are written after the tick, off its clock: the tick's timer
stops once its commands are handed over, the writes have their own histogram, and a tick
that fails still writes the routes log."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from sidecar_harness import (
    arrival,
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    telemetry,
    tick,
)

from kvcast.serving.cluster.summary import parse_metrics
from kvcast.serving.sidecar.parquet_parts import PartedLog

SLOW_S = 0.2  # a disk this slow per row group


def _sum(metrics: str, name: str) -> float:
    return parse_metrics(metrics)[f"kvcast_sidecar_{name}_sum"]


def test_the_tick_timer_stops_before_the_logs_are_written(
    tmp_path, run, model_path, monkeypatch
) -> None:
    real_flush = PartedLog.flush

    def slow_flush(self: PartedLog) -> None:
        if self._rows:
            time.sleep(SLOW_S)
        real_flush(self)

    monkeypatch.setattr(PartedLog, "flush", slow_flush)
    sent: list = []

    async def main() -> tuple[int, str]:
        cfg = sidecar_config(tmp_path, model=str(model_path), mode="active")
        async with open_sidecar(cfg) as (sc, client):
            sc.loop.sink = sent.extend
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            for k in (1, 2, 3):
                await hot_chain_on_node_a(client, chain(k), tenant=f"t{k}")
            await settle(sc)
            made = await tick(sc)  # 3 decisions >= rows_per_chunk=2: the log writes a group
            assert sc.decision_log.chunks == 1
            return len(made), (await client.get("/metrics")).text

    made, metrics = run(main())
    assert made == 3 and len(sent) == 3
    assert _sum(metrics, "tick_seconds") < SLOW_S  # one tick, its writes not counted in it
    assert _sum(metrics, "log_write_seconds") >= SLOW_S


def test_a_tick_that_fails_still_writes_the_routes_log(tmp_path, run, model_path) -> None:
    log = {"path": str(tmp_path / "decisions.parquet"), "rows_per_chunk": 1}

    async def main() -> tuple[int, int]:
        cfg = sidecar_config(tmp_path, model=str(model_path), decision_log=log)
        async with open_sidecar(cfg) as (sc, client):
            r = await client.post("/v1/requests", json={"requests": [
                arrival("r1", "acme", chain(1)), arrival("r2", "acme", chain(2))]})  # fmt: skip
            assert r.status_code == 202, r.text
            await settle(sc)

            def broken(*args: object) -> None:
                raise RuntimeError("a view that cannot be built")

            sc.loop.live.view = broken
            with pytest.raises(RuntimeError, match="cannot be built"):
                await tick(sc)
            return sc.routes_log.written, sc.decision_log.written

    routes, decisions = run(main())
    assert (routes, decisions) == (2, 0)
    part = tmp_path / "decisions.routes.parquet"
    assert pq.read_table(part).column("request_id").to_pylist() == ["r1", "r2"]
