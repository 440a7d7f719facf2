"""The routes log: every request the router routed, written beside the decision log with its
node id (the decision log's numbering), in parts that rotate like the decision log's, so
that ``kvcast shadow-eval --routes`` can read a live run's routes; a killed sidecar loses its
open part at most."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
import yaml
from killed_writer import kill_mid_part
from serve_processes import SIDECAR_READY, start

from kvcast.features.events import RequestArrived
from kvcast.predictor.shadow_eval import RoutesError, read_decisions, read_routes
from kvcast.serving.sidecar.routes_log import SCHEMA, RoutesLog, routes_path

NAMES = ("a", "b", "c")


def arrival(i: int, node: int) -> RequestArrived:
    return RequestArrived(1000.0 + i, f"r{i}", node, f"t{i % 2}", "s" if i % 2 else None,
                          100 + i, 10, tuple(range(i % 4 + 1)))  # fmt: skip


def test_noted_requests_are_written_with_their_node_and_rotate_into_parts(
    tmp_path: Path,
) -> None:
    path = routes_path(tmp_path / "decisions.parquet")
    assert path == tmp_path / "decisions.routes.parquet"
    log = RoutesLog(path, NAMES, rows_per_chunk=2, flush_s=3600, rotate_rows=4, rotate_s=3600)
    log.note([arrival(0, 0), arrival(1, 1)])
    assert not path.exists()  # noting never touches the disk: the next tick writes
    log.maybe_flush()
    for i in range(2, 10, 2):  # a row group of 2 per tick
        log.note([arrival(i, i % 3), arrival(i + 1, (i + 1) % 3)])
        log.maybe_flush()
    second = tmp_path / "decisions.routes.part-0002.parquet"
    assert log.parts == [path, second]  # 4 rows each, closed: readable while it runs on
    log.close()
    third = tmp_path / "decisions.routes.part-0003.parquet"
    assert log.parts == [path, second, third] and (log.written, log.lost) == (10, 0)
    assert pq.read_table(path).schema.equals(SCHEMA)
    rows = [r for p in log.parts for r in pq.read_table(p).to_pylist()]
    assert [r["request_id"] for r in rows] == [f"r{i}" for i in range(10)]
    assert rows[4] == {
        "ts_ms": 1004.0, "request_id": "r4", "node": 1, "node_name": "b", "tenant": "t0",
        "session": None, "input_tokens": 104, "output_tokens": 10, "blocks": 1,
    }  # fmt: skip
    for given in (path, tmp_path):  # the run's first part, or the directory
        got = read_routes(given)
        assert got.to_dict() == {f"r{i}": i % 3 for i in range(10)}


def test_a_later_run_writes_beside_an_earlier_one_and_the_directory_reads_both(
    tmp_path: Path,
) -> None:
    first = RoutesLog(routes_path(tmp_path / "d.parquet"), NAMES, 1, 3600)
    first.note([arrival(0, 0)])
    first.close()
    earlier = first.parts[0].read_bytes()
    again = RoutesLog(routes_path(tmp_path / "d.parquet"), NAMES, 1, 3600)
    assert again.path == tmp_path / "d.routes.1.parquet"  # never over the earlier run's file
    again.note([arrival(1, 2)])
    again.close()
    assert first.parts[0].read_bytes() == earlier
    assert read_routes(tmp_path).to_dict() == {"r0": 0, "r1": 2}


def test_rows_beyond_the_pending_bound_are_dropped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcast.serving.sidecar.routes_log as routes_log

    monkeypatch.setattr(routes_log, "MAX_PENDING", 3)
    log = RoutesLog(tmp_path / "d.routes.parquet", NAMES, 100, 3600)
    log.note([arrival(i, 0) for i in range(5)])
    log.close()
    assert (log.written, log.dropped) == (3, 2)
    assert list(read_routes(log.path).index) == ["r0", "r1", "r2"]


CHILD = textwrap.dedent(
    """
    import sys, time
    from kvcast.features.events import RequestArrived
    from kvcast.serving.sidecar.routes_log import RoutesLog

    log = RoutesLog(sys.argv[1], ("a", "b"), rows_per_chunk=2, flush_s=3600, rotate_rows=4,
                    rotate_s=3600)
    for i in range(10):
        log.note([RequestArrived(1000.0 + i, f"r{i}", i % 2, "t", None, 10, 1, (i,))])
        log.maybe_flush()
    print(len(log.parts), log.written, flush=True)
    time.sleep(120)  # killed here, part 3 open: a row group written, no footer
    """
)


def test_a_killed_writer_loses_only_its_open_part(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = tmp_path / "decisions.routes.parquet"
    open_part = tmp_path / "decisions.routes.part-0003.parquet"
    kill_mid_part(CHILD, first, open_part)
    for given in (first, tmp_path):
        caplog.clear()
        got = read_routes(given)
        assert got.to_dict() == {f"r{i}": i % 2 for i in range(8)}  # parts 1 and 2
        assert any(str(open_part) in m and "lost" in m for m in caplog.messages)
    for f in (first, tmp_path / "decisions.routes.part-0002.parquet"):
        f.unlink()
    with pytest.raises(RoutesError, match="truncated Parquet routes log"):
        read_routes(tmp_path)  # nothing else left to read


def closed(part: Path) -> bool:
    """Whether the part has its footer (a part still open cannot be read)."""
    try:
        pq.read_metadata(part)
    except (OSError, ValueError):
        return False
    return True


def test_a_sidecar_process_in_shadow_mode_logs_every_posted_request_and_its_node(
    tmp_path: Path,
) -> None:
    """A real sidecar (shadow mode, no model: it decides nothing) gets requests over HTTP,
    by node name and by id, one of them twice; stopped, its routes log holds each once with
    the node id the decider uses, and the decision log's directory still reads as one."""
    logs = tmp_path / "logs"
    nodes = ["gpu-0", "gpu-1", "gpu-2"]
    cfg = {
        "listen": "127.0.0.1:0", "mode": "shadow", "nodes": [{"name": n} for n in nodes],
        "tick_ms": 50.0,
        "decision_log": {"path": str(logs / "decisions.parquet"), "rows_per_chunk": 4,
                         "flush_s": 0.1, "rotate_rows": 5},
    }  # fmt: skip
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    proc = start(["serve", "sidecar", "--config", str(config)], env)
    want: dict[str, int] = {}
    try:
        proc.wait_ready(SIDECAR_READY)
        with httpx.Client(base_url=proc.http, timeout=10.0) as http:
            for batch in range(4):
                reqs = []
                for j in range(3):
                    i = batch * 3 + j
                    node = (i * 7) % 3
                    want[f"req-{i}"] = node
                    reqs.append({
                        "request_id": f"req-{i}", "node": nodes[node] if i % 2 else node,
                        "tenant": "acme", "block_hashes": [i, i + 100], "input_tokens": 40,
                        "output_tokens": 8,
                    })  # fmt: skip
                r = http.post("/v1/requests", json={"requests": reqs})
                assert r.status_code == 202, r.text
                time.sleep(0.3)  # a few ticks: each batch its own row group
            r = http.post("/v1/requests", json={"requests": reqs[:1]})  # a retried batch
            assert r.json()["duplicates"] == 1
            deadline = time.monotonic() + 10  # the ticks write while it runs: parts closed
            while not closed(logs / "decisions.routes.part-0002.parquet"):
                assert time.monotonic() < deadline, "".join(proc.log)
                time.sleep(0.05)
        assert proc.stop(signal.SIGINT) == 0, "".join(proc.log)
    finally:
        proc.kill()
    got = read_routes(logs / "decisions.routes.parquet")
    assert got.to_dict() == want and len(got) == 12
    assert read_routes(logs).to_dict() == want
    rows = pq.read_table(logs / "decisions.routes.parquet").to_pylist()
    assert rows[0]["node_name"] == nodes[rows[0]["node"]] and rows[0]["tenant"] == "acme"
    if (logs / "decisions.parquet").exists():  # a decision log beside it still reads alone
        read_decisions(logs)
