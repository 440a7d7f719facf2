"""Shadow mode: every decision is written to the Parquet decision log (row groups as they
fill, the documented columns, the numbers behind the decision) and nothing is sent; an
earlier run's log is never overwritten."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from sidecar_harness import (
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    telemetry,
    tick,
)

from kvcast.serving.sidecar.decision_log import SCHEMA, DecisionLog


def test_shadow_mode_logs_each_decision_to_parquet_and_sends_nothing(
    tmp_path, run, model_path
) -> None:
    earlier = tmp_path / "decisions.parquet"
    earlier.write_bytes(b"an earlier run's log")
    chains = [chain(1), chain(2), chain(3)]

    async def main() -> str:
        cfg = sidecar_config(tmp_path, model=str(model_path))
        async with open_sidecar(cfg) as (sc, client):
            assert sc.mode == "shadow"
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            for hashes in chains:
                await hot_chain_on_node_a(client, hashes, tenant=f"t{hashes[0] >> 32}")
            await settle(sc)
            made = await tick(sc)
            assert sorted(d.block_hashes[0] for d in made) == sorted(c[0] for c in chains)
            assert {d.status for d in made} == {"shadow"}
            assert sc.decision_log.chunks == 1  # 3 rows >= rows_per_chunk=2: written at once
            assert (sc.executor.issued, sc.executor.evictions, len(sc.executor._tasks)) == (0, 0, 0)
            return sc.slot.current.info.digest

    digest = run(main())
    assert earlier.read_bytes() == b"an earlier run's log"
    log = tmp_path / "decisions.1.parquet"
    table = pq.read_table(log)
    assert table.schema.equals(SCHEMA)
    meta = pq.ParquetFile(log).metadata
    assert (meta.num_row_groups, meta.num_rows) == (1, 3)
    rows = sorted(table.to_pylist(), key=lambda r: r["block_hashes"][0])
    for row, hashes in zip(rows, chains, strict=True):
        assert (row["mode"], row["kind"]) == ("shadow", "replicate")
        assert (row["source"], row["target"]) == (0, 1)
        assert (row["source_name"], row["target_name"]) == ("node-a", "node-b")
        assert row["tenant"] == f"t{hashes[0] >> 32}"
        assert row["block_hashes"] == hashes and row["blocks_moved"] == len(hashes)
        assert row["bytes"] == len(hashes) * (256 << 10)
        assert len(row["p_blocks"]) == len(hashes) and min(row["p_blocks"]) > 0.9
        assert row["p_hit"] > 0.9 and row["saved_ms"] > 0 and row["net_ms"] > 0
        cost = row["transfer_ms"] + row["congestion_ms"] + row["memory_ms"] + row["reclaim_ms"]
        assert abs(row["p_hit"] * row["saved_ms"] - cost - row["net_ms"]) < 1e-6
        assert row["model"] == digest and row["ttl_ms"] > 0 and "p=" in row["reason"]


def test_a_log_that_cannot_be_written_never_holds_back_a_tick_or_its_commands(
    tmp_path, run, model_path
) -> None:
    """The log's directory is replaced by a file while the sidecar runs (a path that cannot
    exist at start is refused then): every tick still counts and sends its commands, the rows
    are dropped and counted, not kept in memory, and the sidecar stops cleanly."""
    import shutil

    logs = tmp_path / "logs"
    sent: list = []

    async def main() -> tuple[int, int, int, str]:
        log = {"path": str(logs / "decisions.parquet"), "rows_per_chunk": 1}
        cfg = sidecar_config(tmp_path, model=str(model_path), mode="active", decision_log=log)
        async with open_sidecar(cfg) as (sc, client):
            shutil.rmtree(logs)
            logs.write_text("not a directory any more")
            sc.loop.sink = sent.extend  # what the executor would get
            for i, name in enumerate(cfg.node_names):
                sc.loads.note_telemetry(i, telemetry(name))
            for k in (1, 2, 3):
                await hot_chain_on_node_a(client, chain(k), tenant=f"t{k}")
            await settle(sc)
            before = sc.loop.ticks
            made = [d for _ in range(3) for d in sc.loop.tick()]
            metrics = (await client.get("/metrics")).text
            return sc.loop.ticks - before, len(made), len(sc.decision_log._rows), metrics

    ticks, made, held, metrics = run(main())
    assert ticks == 3 and made > 0 and len(sent) == made
    assert held == 0
    assert f"kvcast_sidecar_decision_log_rows_lost_total {float(made)}" in metrics
    # the routes log beside it fails alike: its 3 routed requests dropped, counted, no tick lost
    assert "kvcast_sidecar_routes_log_rows_lost_total 3.0" in metrics


def test_a_log_path_whose_directory_cannot_exist_is_refused_at_start(tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"decision_log.path .*cannot create its directory"):
        DecisionLog(blocker / "decisions.parquet", ("a",), 10, 1.0)
    # an existing directory: its rows would have gone to <dir>.1 beside it
    with pytest.raises(ValueError, match=r"decision_log.path '.*' is a directory: name a file"):
        DecisionLog(tmp_path, ("a",), 10, 1.0)
    assert not tmp_path.with_name(tmp_path.name + ".1").exists()


def test_the_sidecar_rotates_its_log_as_configured(tmp_path) -> None:
    """decision_log.rotate_rows / rotate_s in the sidecar's config reach its log."""
    from kvcast.serving.sidecar.core import Sidecar

    log = {"path": str(tmp_path / "d.parquet"), "rows_per_chunk": 2, "rotate_rows": 7,
           "rotate_s": 12.5}  # fmt: skip
    sc = Sidecar(sidecar_config(tmp_path, decision_log=log))
    assert sc.decision_log is not None
    assert (sc.decision_log.rotate_rows, sc.decision_log.rotate_s) == (7, 12.5)
