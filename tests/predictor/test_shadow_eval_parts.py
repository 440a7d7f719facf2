"""Reading a rotated decision log: a run's parts are read together, in order, from its first
part or from their directory; a part cut short by a killed writer is skipped with a warning
naming it, unless nothing readable is left."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_shadow_eval import LOG, trace, write_log

from kvcast.predictor.shadow_eval import DecisionLogError, evaluate_shadow, read_decisions

ROWS = list(LOG.values())  # 9 rows with unique ids


def truncated(path: Path) -> Path:
    """A part whose writer was killed: row groups written, the footer never."""
    data = write_log(path, ROWS).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def ids(paths: list[int]) -> list[str]:
    return [ROWS[i]["decision_id"] for i in paths]


def test_a_runs_first_part_reads_all_its_parts_in_part_order(tmp_path: Path) -> None:
    first = write_log(tmp_path / "decisions.parquet", ROWS[:2])
    write_log(tmp_path / "decisions.part-0010.parquet", ROWS[6:])  # numeric, not name order
    write_log(tmp_path / "decisions.part-0002.parquet", ROWS[2:4])
    write_log(tmp_path / "decisions.part-0003.parquet", ROWS[4:6])
    write_log(tmp_path / "decisions.1.parquet", ROWS[:1])  # another run: not this one's part
    write_log(tmp_path / "decisions.1.part-0002.parquet", ROWS[:1])
    assert read_decisions(first)["decision_id"].tolist() == ids(list(range(9)))
    s = evaluate_shadow(read_decisions(first), trace()).summary
    assert s["decisions"] == 8 and s["hits"] == 4 and s["evictions"] == 1
    # a part given on its own is that part only
    part = read_decisions(tmp_path / "decisions.part-0003.parquet")
    assert part["decision_id"].tolist() == ids([4, 5])


def test_a_directory_reads_runs_in_order_and_each_runs_parts_in_order(tmp_path: Path) -> None:
    write_log(tmp_path / "decisions.1.part-0002.parquet", ROWS[8:])
    write_log(tmp_path / "decisions.part-0002.parquet", ROWS[2:5])
    write_log(tmp_path / "decisions.1.parquet", ROWS[5:8])
    write_log(tmp_path / "decisions.parquet", ROWS[:2])
    assert read_decisions(tmp_path)["decision_id"].tolist() == ids(list(range(9)))


@pytest.mark.parametrize("given", ["decisions.parquet", "."])
def test_a_part_cut_short_by_a_kill_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, given: str, caplog: pytest.LogCaptureFixture
) -> None:
    write_log(tmp_path / "decisions.parquet", ROWS[:4])
    write_log(tmp_path / "decisions.part-0002.parquet", ROWS[4:])
    cut = truncated(tmp_path / "decisions.part-0003.parquet")
    with caplog.at_level(logging.WARNING):
        df = read_decisions(tmp_path / given)
    assert df["decision_id"].tolist() == ids(list(range(9)))
    [message] = caplog.messages
    assert message.startswith(f"{cut}: truncated") and "rows were lost" in message
    # the part a running sidecar has open reads the same: not called a kill, nor a loss
    assert "still being written" in message and "not yet readable" in message
    warned: list[str] = []
    read_decisions(tmp_path / given, warn=warned.append)  # the CLI prints them its own way
    assert warned == [message]


def test_a_run_with_nothing_readable_is_refused_naming_the_truncated_part(tmp_path: Path) -> None:
    cut = truncated(tmp_path / "decisions.parquet")
    truncated(tmp_path / "decisions.part-0002.parquet")
    for given in (cut, tmp_path):
        with pytest.raises(DecisionLogError, match=f"{cut}: truncated Parquet decision log"):
            read_decisions(given)


def test_the_run_a_replay_judges_is_the_one_written_during_it(tmp_path: Path) -> None:
    """What `cluster replay` names for judging: the run of the configured log written since
    the replay started, told by when its parts were written, not by its name (a restarted
    sidecar takes the first free number: decisions.1 when decisions.2 was left, say); an
    earlier cluster's log in the same workdir is not it."""
    import os
    import time

    from kvcast.predictor.decision_log_reader import written_since

    path = tmp_path / "decisions.parquet"
    old = time.time() - 3600
    for name in ("decisions.parquet", "decisions.2.parquet", "decisions.2.part-0002.parquet"):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (old, old))
    started = time.time() - 5
    assert written_since(path, started) is None  # the earlier runs' logs only
    (tmp_path / "decisions.1.parquet").write_bytes(b"")  # this sidecar's, a free number
    (tmp_path / "decisions.1.routes.parquet").write_bytes(b"")  # a routes log: not a run
    (tmp_path / "other.parquet").write_bytes(b"")
    assert written_since(path, started) == tmp_path / "decisions.1.parquet"
    # a run whose first part is old but whose later part was written during the replay
    os.utime(tmp_path / "decisions.1.parquet", (old, old))
    (tmp_path / "decisions.2.part-0003.parquet").write_bytes(b"")
    assert written_since(path, started) == tmp_path / "decisions.2.parquet"
