"""The decision log rotates: a part is closed (its footer written) once it holds
``rotate_rows`` rows or has been open ``rotate_s`` seconds, so a killed sidecar loses the rows
of its open part at most, never the run; parts never overwrite an earlier run's files."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from killed_writer import kill_mid_part
from pydantic import ValidationError

from kvcast.predictor.shadow_eval import read_decisions
from kvcast.serving.sidecar.config import DecisionLogConfig, SidecarConfig
from kvcast.serving.sidecar.decision_log import ROTATE_ROWS, ROTATE_S, DecisionLog
from kvcast.serving.sidecar.decisions import Decision

NAMES = ("a", "b")


def evict(i: int) -> Decision:
    return Decision(f"d{i}", i, 1000.0 + i, "shadow", "evict", -1, 0, "", (i + 1,), 100, 0,
                    0.0, math.nan, (math.nan,), None, "", "", "shadow")  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ids(path: Path) -> list[str]:
    return pq.read_table(path).column("decision_id").to_pylist()


def test_a_part_is_closed_at_rotate_rows_and_the_next_part_started(tmp_path: Path) -> None:
    first = tmp_path / "decisions.parquet"
    log = DecisionLog(first, NAMES, rows_per_chunk=2, flush_s=3600, rotate_rows=4, rotate_s=3600)
    for i in range(10):
        log.add([evict(i)])
    second = tmp_path / "decisions.part-0002.parquet"
    assert log.parts == [first, second]  # closed: readable while the log runs on
    assert ids(first) == ["d0", "d1", "d2", "d3"] and ids(second) == ["d4", "d5", "d6", "d7"]
    assert log.path == first  # the run keeps its name: its first part
    log.close()
    third = tmp_path / "decisions.part-0003.parquet"
    assert log.parts == [first, second, third] and ids(third) == ["d8", "d9"]
    assert (log.written, log.lost) == (10, 0)


def test_a_part_is_closed_once_open_rotate_s_even_without_new_rows(tmp_path: Path) -> None:
    clock = Clock()
    log = DecisionLog(tmp_path / "decisions.parquet", NAMES, rows_per_chunk=1, flush_s=3600,
                      rotate_rows=1000, rotate_s=60, clock=clock)  # fmt: skip
    log.add([evict(0)])  # part 1 opened at t=0
    clock.t = 59.9
    log.maybe_flush()  # the decision loop calls it every tick
    assert log.parts == []
    clock.t = 60.0
    log.maybe_flush()
    assert log.parts == [tmp_path / "decisions.parquet"]
    assert ids(tmp_path / "decisions.parquet") == ["d0"]
    clock.t = 200.0
    log.maybe_flush()  # nothing open, nothing written: no empty part
    log.add([evict(1)])  # part 2 opened at t=200
    clock.t = 259.0
    log.maybe_flush()
    assert len(log.parts) == 1
    clock.t = 260.0
    log.maybe_flush()
    assert ids(tmp_path / "decisions.part-0002.parquet") == ["d1"] and len(log.parts) == 2


def test_rows_held_when_a_part_times_out_close_with_it(tmp_path: Path) -> None:
    clock = Clock()
    log = DecisionLog(tmp_path / "d.parquet", NAMES, rows_per_chunk=1000, flush_s=3600,
                      rotate_rows=1000, rotate_s=60, clock=clock)  # fmt: skip
    log.add([evict(0)])
    log.flush()  # part 1 opened at t=0
    log.add([evict(1)])  # held: neither rows_per_chunk nor flush_s reached
    clock.t = 60.0
    log.maybe_flush()
    assert log.parts == [tmp_path / "d.parquet"] and ids(tmp_path / "d.parquet") == ["d0", "d1"]


def test_parts_never_overwrite_an_earlier_runs_files(tmp_path: Path) -> None:
    earlier = {n: f"run 0 {n}".encode() for n in ("d.parquet", "d.part-0002.parquet")}
    for name, data in earlier.items():
        (tmp_path / name).write_bytes(data)
    # a run whose first part is gone: its later parts still claim its name
    (tmp_path / "d.1.part-0002.parquet").write_bytes(b"run 1 part 2")
    log = DecisionLog(tmp_path / "d.parquet", NAMES, rows_per_chunk=1, flush_s=3600,
                      rotate_rows=1, rotate_s=3600)  # fmt: skip
    assert log.path == tmp_path / "d.2.parquet"
    log.add([evict(0), evict(1)])
    log.add([evict(2)])
    log.close()
    assert log.parts == [tmp_path / "d.2.parquet", tmp_path / "d.2.part-0002.parquet"]
    for name, data in earlier.items():
        assert (tmp_path / name).read_bytes() == data
    assert (tmp_path / "d.1.part-0002.parquet").read_bytes() == b"run 1 part 2"
    assert ids(log.parts[0]) == ["d0", "d1"] and ids(log.parts[1]) == ["d2"]


@pytest.mark.parametrize(
    ("key", "value"), [("rotate_rows", 0), ("rotate_s", 0.0), ("rotate_s", math.inf)]
)
def test_bad_rotation_settings_are_refused_naming_the_value(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"rotate_{key[7:]} must be a .*, got {value}"):
        DecisionLog("unused.parquet", NAMES, 1, 1.0, **{key: value})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=f"decision_log.{key}"):
        SidecarConfig.model_validate({"nodes": [{"name": "a"}], "decision_log": {key: value}})


def test_the_configs_rotation_defaults_are_the_logs() -> None:
    cfg = DecisionLogConfig()
    assert (cfg.rotate_rows, cfg.rotate_s) == (ROTATE_ROWS, ROTATE_S)
    assert ROTATE_S <= 60  # "a killed sidecar loses at most a short interval"


CHILD = textwrap.dedent(
    """
    import math, sys, time
    from kvcast.serving.sidecar.decision_log import DecisionLog
    from kvcast.serving.sidecar.decisions import Decision

    log = DecisionLog(sys.argv[1], ("a", "b"), rows_per_chunk=2, flush_s=3600, rotate_rows=4,
                      rotate_s=3600)
    for i in range(10):
        log.add([Decision(f"d{i}", i, 1000.0 + i, "shadow", "evict", -1, 0, "", (i + 1,), 100,
                          0, 0.0, math.nan, (math.nan,), None, "", "", "shadow")])
    print(len(log.parts), log.written, flush=True)
    time.sleep(120)  # killed here, part 3 open: a row group written, no footer
    """
)


def test_a_sidecar_killed_by_sigkill_loses_only_its_open_part(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = tmp_path / "decisions.parquet"
    open_part = tmp_path / "decisions.part-0003.parquet"
    kill_mid_part(CHILD, first, open_part)
    for given in (first, tmp_path):
        caplog.clear()
        df = read_decisions(given)
        assert df["decision_id"].tolist() == [f"d{i}" for i in range(8)]  # parts 1 and 2
        assert any(str(open_part) in m and "lost" in m for m in caplog.messages)
