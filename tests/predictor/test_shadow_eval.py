"""Shadow evaluation on a hand-built decision log and trace whose hits, lead times, hidden
transfer and waste are known by construction; with hand-built routes, where each hit's
request went (the copy's target node, its source, or elsewhere)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvcast.features.traces import Trace
from kvcast.features.traces.table import make_table
from kvcast.predictor.shadow_eval import (
    DecisionLogError,
    RoutesError,
    ShadowConfig,
    evaluate_shadow,
    read_decisions,
    read_routes,
)
from kvcast.serving.sidecar.decision_log import SCHEMA

BLOCK = 100  # bytes per block in these logs
_IDS = itertools.count()  # decision ids are unique


def trace() -> Trace:
    """Arrivals (trace ms): 1000 [1,2,3]; 5000 [1,2,4]; 20000 [7,8]; 40000 tenant b [9];
    100000 [1] (the last arrival)."""
    df = make_table(
        arrival_ms=[1000.0, 5000.0, 20000.0, 40000.0, 100000.0],
        input_tokens=[48, 48, 32, 16, 16],
        output_tokens=[1] * 5,
        block_hashes=[[1, 2, 3], [1, 2, 4], [7, 8], [9], [1]],
        tenant=["a", "a", "a", "b", "a"],
    )
    return Trace(df, "hand", 16)


def decision(
    ts: float, chain: list[int], moved: int, *, kind: str = "replicate", tenant: str = "a",
    ttl: float = 10_000.0, transfer: float = 100.0, saved: float = 0.0, p: float = 0.5,
    source: int = 0, target: int = 1,
) -> dict[str, Any]:  # fmt: skip
    nan = math.nan
    return {
        "ts_ms": ts, "decision_id": f"d{next(_IDS)}", "tick": 0, "mode": "shadow", "kind": kind,
        "source": source, "target": target, "source_name": f"n{source}",
        "target_name": f"n{target}", "tenant": tenant,
        "block_hashes": chain, "blocks_moved": moved, "bytes": moved * BLOCK,
        "p_blocks": [p] * len(chain), "p_hit": p if kind != "evict" else nan,
        "saved_ms": saved, "transfer_ms": transfer, "congestion_ms": 0.0, "memory_ms": 0.0,
        "reclaim_ms": 0.0, "holder_queue_ms": 0.0, "target_queue_ms": 0.0, "net_ms": 0.0,
        "priority": 0, "ttl_ms": ttl, "deadline_ms": nan, "reason": "", "model": "m",
    }  # fmt: skip


# name -> decision; the comment says what it must be, and why
LOG = {
    # block 4 is used at 5000: hit, lead 3000, transfer 100 / 0.25 = 400, covered
    "A": decision(2000.0, [1, 2, 4], 1, saved=50.0),
    # the copy is blocks 2, 3; the request at 5000 uses block 2: hit, lead 3000, covered
    "B": decision(2000.0, [1, 2, 3], 2, saved=70.0),
    # [7, 8] is used at 20000, after the TTL (19000 + 500): miss
    "C": decision(19000.0, [7, 8], 2, ttl=500.0, saved=1000.0),
    # block 8 used 10 ms later; transfer 25 / 0.25 = 100: hit, hidden 10, not covered
    "D": decision(19990.0, [7, 8], 1, transfer=25.0, saved=30.0),
    # block 9 is used at 40000 by tenant b only: miss
    "E": decision(39000.0, [9], 1, saved=1000.0),
    # at 5000 exactly: the request at 5000 is not after it, and 4 is never used again: miss
    "G": decision(5000.0, [1, 2, 4], 1, saved=1000.0),
    # 95000 + 30000 runs past the last arrival: a censored miss
    "H": decision(95000.0, [5], 1, ttl=30_000.0, saved=1000.0),
    # a promotion of block 4 at 4000 on node 2 (its own lower tier: source = target): hit,
    # lead 1000, transfer 40 / 0.2 = 200, covered
    "I": decision(
        4000.0, [1, 2, 4], 1, kind="promote", transfer=40.0, saved=20.0, source=2, target=2
    ),
    # evictions are set aside
    "F": decision(3000.0, [1, 2], 2, kind="evict"),
}
JUDGED = ["A", "B", "C", "D", "E", "G", "H", "I"]  # the log's order without F


def write_log(path: Path, rows: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return write_log(tmp_path / "decisions.parquet", list(LOG.values()))


def outcome(res: Any, name: str) -> dict[str, Any]:
    return res.outcomes.iloc[JUDGED.index(name)].to_dict()


def test_hit_needs_the_copys_first_block_used_after_the_decision_within_its_ttl(
    log_path: Path,
) -> None:
    res = evaluate_shadow(read_decisions(log_path), trace())
    hits = {n: bool(outcome(res, n)["hit"]) for n in JUDGED}
    assert hits == {"A": True, "B": True, "C": False, "D": True, "E": False, "G": False,
                    "H": False, "I": True}  # fmt: skip
    assert res.summary["hits"] == 4 and res.summary["decisions"] == 8
    assert res.summary["hit_rate"] == pytest.approx(0.5)


def test_hit_needs_the_same_tenant_unless_the_log_has_none(tmp_path: Path) -> None:
    other = write_log(tmp_path / "b.parquet", [decision(39000.0, [9], 1, tenant="b")])
    anyone = write_log(tmp_path / "any.parquet", [decision(39000.0, [9], 1, tenant="")])
    wrong = write_log(tmp_path / "a.parquet", [decision(39000.0, [9], 1, tenant="a")])
    assert evaluate_shadow(read_decisions(other), trace()).summary["hits"] == 1
    assert evaluate_shadow(read_decisions(anyone), trace()).summary["hits"] == 1
    assert evaluate_shadow(read_decisions(wrong), trace()).summary["hits"] == 0


def test_lead_hidden_transfer_and_cover_follow_the_definitions(log_path: Path) -> None:
    res = evaluate_shadow(read_decisions(log_path), trace())
    want = {"A": (3000.0, 400.0, 400.0, True), "B": (3000.0, 400.0, 400.0, True),
            "D": (10.0, 100.0, 10.0, False), "I": (1000.0, 200.0, 200.0, True)}  # fmt: skip
    for name, (lead, transfer, hidden, covered) in want.items():
        o = outcome(res, name)
        assert (o["lead_ms"], o["transfer_ms"], o["hidden_ms"], o["covered"]) == pytest.approx(
            (lead, transfer, hidden, covered)
        ), name
    s = res.summary
    assert s["mean_lead_time_ms"] == pytest.approx((3000 + 3000 + 10 + 1000) / 4)
    assert s["transfer_hidden_ms"] == pytest.approx(400 + 400 + 10 + 200)
    assert s["lead_covers_transfer_fraction"] == pytest.approx(0.75)
    assert s["transfer_ms_source"] == "transfer_ms / transfer_weight"


def test_wasted_bytes_are_the_bytes_of_decisions_never_hit(log_path: Path) -> None:
    s = evaluate_shadow(read_decisions(log_path), trace()).summary
    assert s["bytes_decided"] == BLOCK * (1 + 2 + 2 + 1 + 1 + 1 + 1 + 1)
    assert s["bytes_wasted"] == BLOCK * (2 + 1 + 1 + 1)  # C, E, G, H
    assert s["wasted_fraction"] == pytest.approx(5 / 10)


def test_ttft_saved_sums_the_hits_logged_saved_ms(log_path: Path) -> None:
    s = evaluate_shadow(read_decisions(log_path), trace()).summary
    assert s["ttft_saved_ms"] == pytest.approx(50 + 70 + 30 + 20)
    expected = 0.5 * (50 + 70 + 1000 + 30 + 1000 + 1000 + 1000 + 20)
    assert s["ttft_saved_expected_ms"] == pytest.approx(expected)


def test_evictions_are_set_aside_and_censored_misses_counted(log_path: Path) -> None:
    res = evaluate_shadow(read_decisions(log_path), trace())
    assert res.summary["evictions"] == 1
    assert res.summary["by_kind"] == {"replicate": 7, "promote": 1}
    assert [n for n in JUDGED if outcome(res, n)["censored"]] == ["H"]


def test_go_live_passes_only_when_enough_hits_have_lead_covering_transfer(
    log_path: Path,
) -> None:
    log = read_decisions(log_path)
    assert (
        evaluate_shadow(log, trace(), ShadowConfig(min_covered=0.9)).summary["go_live"]["pass"]
        is False
    )
    s = evaluate_shadow(log, trace(), ShadowConfig(min_covered=0.75, min_hits=1)).summary
    assert s["go_live"]["pass"] is True
    hits = s["hits"]  # enough of them covered, but one fewer than needed to judge: no pass
    fewer = ShadowConfig(min_covered=0.75, min_hits=hits + 1)
    assert evaluate_shadow(log, trace(), fewer).summary["go_live"]["pass"] is False
    assert (
        evaluate_shadow(log, trace(), ShadowConfig(min_covered=0.75)).summary["go_live"]["min_hits"]
        == 20
        > hits
    )  # the default asks for more hits than this small log has
    none = read_decisions(write_log(log_path.with_name("none.parquet"), [LOG["C"]]))
    s = evaluate_shadow(none, trace(), ShadowConfig(min_covered=0.0)).summary
    assert s["hits"] == 0 and s["go_live"]["pass"] is False  # no hit proves nothing


def test_transfer_weight_and_eta_column_set_the_transfer_time(tmp_path: Path) -> None:
    rows = [LOG["D"]]
    log = read_decisions(write_log(tmp_path / "d.parquet", rows))
    s = evaluate_shadow(log, trace(), ShadowConfig(transfer_weight=2.5)).summary
    assert s["mean_transfer_ms_of_hits"] == pytest.approx(10.0)  # 25 / 2.5: now covered
    assert s["lead_covers_transfer_fraction"] == 1.0
    schema = SCHEMA.append(pa.field("eta_ms", pa.float64()))
    eta = read_decisions(write_log(tmp_path / "eta.parquet", [{**LOG["D"], "eta_ms": 7.0}], schema))
    s = evaluate_shadow(eta, trace()).summary
    assert s["transfer_ms_source"] == "eta_ms" and s["mean_transfer_ms_of_hits"] == 7.0


def test_only_the_rows_without_a_finite_eta_fall_back_to_the_weighted_transfer(
    tmp_path: Path,
) -> None:
    schema = SCHEMA.append(pa.field("eta_ms", pa.float64()))
    rows = [{**LOG["A"], "eta_ms": None}, {**LOG["D"], "eta_ms": 7.0}]
    log = read_decisions(write_log(tmp_path / "mixed.parquet", rows, schema))
    result = evaluate_shadow(log, trace())
    out = result.outcomes
    weighted = LOG["A"]["transfer_ms"] / ShadowConfig().transfer_weight
    assert out["transfer_ms"].tolist() == pytest.approx([weighted, 7.0])
    assert bool(out["covered"].iloc[1])  # its own eta (7 ms) within its 10 ms lead
    assert result.summary["transfer_ms_source"] == "eta_ms, else transfer_ms / transfer_weight"


def test_clock_offset_maps_the_logs_clock_onto_the_trace(tmp_path: Path) -> None:
    offset = 1.7e12  # a live sidecar logs unix milliseconds
    shifted = [{**r, "ts_ms": r["ts_ms"] + offset} for r in LOG.values()]
    log = read_decisions(write_log(tmp_path / "live.parquet", shifted))
    s = evaluate_shadow(log, trace(), ShadowConfig(clock_offset_ms=offset)).summary
    assert s["hits"] == 4 and s["mean_lead_time_ms"] == pytest.approx(1752.5)
    with pytest.raises(DecisionLogError, match="--clock-offset-ms"):
        evaluate_shadow(log, trace())


KIND_INT = SCHEMA.set(SCHEMA.get_field_index("kind"), pa.field("kind", pa.int32()))
NO_TTL = SCHEMA.remove(SCHEMA.get_field_index("ttl_ms"))


@pytest.mark.parametrize(
    ("schema", "change", "message"),
    [
        (NO_TTL, {}, "missing column 'ttl_ms'"),
        (KIND_INT, {"kind": 1}, "column 'kind' is int32, expected string"),
        (SCHEMA, {"blocks_moved": 4}, "row 0: column 'blocks_moved' = 4 exceeds the number"),
        (SCHEMA, {"ttl_ms": 0.0}, "row 0: column 'ttl_ms' = 0.0 must be > 0"),
        (SCHEMA, {"ts_ms": math.nan}, "row 0: column 'ts_ms' = nan is not a finite time"),
    ],
)
def test_bad_log_names_the_file_and_the_column(
    tmp_path: Path, schema: pa.Schema, change: dict[str, Any], message: str
) -> None:
    path = write_log(tmp_path / "bad.parquet", [{**LOG["A"], **change}], schema)
    with pytest.raises(DecisionLogError) as err:
        read_decisions(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_missing_or_unreadable_log_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(DecisionLogError, match="no such decision log"):
        read_decisions(tmp_path / "nope.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(DecisionLogError, match=f"{junk}: not a readable Parquet"):
        read_decisions(junk)


def test_a_repeated_decision_id_is_refused_not_counted_twice(tmp_path: Path) -> None:
    rows = list(LOG.values())
    path = write_log(tmp_path / "twice.parquet", rows + rows[:1])
    with pytest.raises(DecisionLogError) as err:
        read_decisions(path)
    msg = str(err.value)
    assert f"row {len(rows)}: column 'decision_id' = {rows[0]['decision_id']!r}" in msg
    assert "repeats" in msg and "row 0" in msg


def test_a_directory_reads_every_run_log_in_it(tmp_path: Path) -> None:
    # a restarted sidecar writes decisions.parquet, then decisions.1.parquet beside it
    rows = list(LOG.values())
    write_log(tmp_path / "decisions.parquet", rows[:4])
    write_log(tmp_path / "decisions.1.parquet", rows[4:])
    s = evaluate_shadow(read_decisions(tmp_path), trace()).summary
    assert s["decisions"] == 8 and s["hits"] == 4 and s["evictions"] == 1
    write_log(tmp_path / "decisions.2.parquet", rows[:1])  # the same decision twice
    with pytest.raises(DecisionLogError, match=r"decisions\.2\.parquet: row 0: .* repeats .*"
                       r"decisions\.parquet: row 0"):  # fmt: skip
        read_decisions(tmp_path)
    (tmp_path / "none").mkdir()
    with pytest.raises(DecisionLogError, match="none: a directory without any"):
        read_decisions(tmp_path / "none")


def test_a_directory_skips_its_other_parquet_tables_and_says_so(tmp_path: Path) -> None:
    """A shadow run's directory (simulate --shadow-log beside --out) holds its requests and
    timeline tables, and perhaps an earlier --outcomes table: not decision logs."""
    rows = list(LOG.values())
    write_log(tmp_path / "decisions.parquet", rows)
    pd.DataFrame({"request_id": ["r"], "node": [0]}).to_parquet(tmp_path / "requests.parquet")
    pd.DataFrame({"decision_id": ["x"], "hit": [True]}).to_parquet(tmp_path / "outcomes.parquet")
    said: list[str] = []
    s = evaluate_shadow(read_decisions(tmp_path, warn=said.append), trace()).summary
    assert s["decisions"] == 8
    assert sorted(said) == [
        f"{tmp_path / 'outcomes.parquet'}: not a decision log (no column 'ts_ms'): skipped",
        f"{tmp_path / 'requests.parquet'}: not a decision log (no column 'ts_ms'): skipped",
    ]
    (tmp_path / "decisions.parquet").unlink()
    with pytest.raises(DecisionLogError, match="a directory without any"):
        read_decisions(tmp_path, warn=said.append)


def test_a_lone_log_cut_short_by_a_killed_writer_is_named_truncated(tmp_path: Path) -> None:
    # (a truncated part beside readable ones is skipped with a warning: test_shadow_eval_parts)
    data = write_log(tmp_path / "whole.parquet", list(LOG.values())).read_bytes()
    cut = tmp_path / "logs" / "decisions.1.parquet"
    cut.parent.mkdir()
    write_log(cut.with_name("decisions.parquet"), list(LOG.values())[:2])  # another run's
    cut.write_bytes(data[: len(data) // 2])  # row groups written, the footer never
    with pytest.raises(DecisionLogError, match=f"{cut}: truncated Parquet decision log"):
        read_decisions(cut)


def test_an_unknown_p_hit_leaves_the_expectation_unknown_not_zero(tmp_path: Path) -> None:
    rows = [{**LOG["A"], "p_hit": math.nan}, LOG["D"]]
    s = evaluate_shadow(read_decisions(write_log(tmp_path / "p.parquet", rows)), trace()).summary
    assert s["ttft_saved_expected_ms"] is None and s["decisions_without_p_hit"] == 1
    assert s["hits"] == 2 and s["ttft_saved_ms"] == pytest.approx(80.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"p_hit": 1.5}, "column 'p_hit' = 1.5 is not a probability"),
        ({"saved_ms": math.nan}, "column 'saved_ms' = nan is not a finite number"),
        ({"transfer_ms": math.inf}, "column 'transfer_ms' = inf is not a finite number"),
    ],
)
def test_a_judged_row_without_the_numbers_it_is_judged_on_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write_log(tmp_path / "bad.parquet", [LOG["F"], {**LOG["A"], **change}])
    with pytest.raises(DecisionLogError, match=f"row 1: {message}"):
        read_decisions(path)
    read_decisions(write_log(tmp_path / "evict.parquet", [{**LOG["F"], **change}]))  # not judged


def test_a_log_whose_blocks_never_occur_in_the_trace_is_refused(tmp_path: Path) -> None:
    foreign = [decision(2000.0, [991, 992], 1), decision(3000.0, [993], 1)]
    with pytest.raises(DecisionLogError, match="another trace or cluster"):
        evaluate_shadow(read_decisions(write_log(tmp_path / "f.parquet", foreign)), trace())
    other_tenant = [decision(2000.0, [1, 2, 4], 1, tenant="zz")]
    with pytest.raises(DecisionLogError, match=r"none of the log's tenants \['zz'\] is in the"):
        evaluate_shadow(read_decisions(write_log(tmp_path / "t.parquet", other_tenant)), trace())
    # blocks that occur, all missed: a report (0 hits), not an error
    missed = [decision(5000.0, [1, 2, 4], 1)]
    s = evaluate_shadow(read_decisions(write_log(tmp_path / "m.parquet", missed)), trace()).summary
    assert s["hits"] == 0 and s["bytes_wasted"] == BLOCK


def test_an_empty_or_evictions_only_log_reports_zero_decisions(tmp_path: Path) -> None:
    for rows in ([], [LOG["F"]]):
        s = evaluate_shadow(read_decisions(write_log(tmp_path / "e.parquet", rows)), trace())
        summary = s.summary
        assert summary["decisions"] == 0 and summary["hit_rate"] is None
        assert summary["ttft_saved_expected_ms"] == 0.0 and summary["go_live"]["pass"] is False


# where each request of trace() went (request ids are its rows): the request at 5000 (the
# first use of A, B and I) to node 1, A's and B's target; the one at 20000 (D's) to node 0,
# D's source; I promotes on node 2, so its request went elsewhere
ROUTES = {"0": 3, "1": 1, "2": 0, "3": 2, "4": 5}


def write_routes(path: Path, routes: dict[str, int] = ROUTES) -> Path:
    pq.write_table(pa.table({"request_id": list(routes), "node": list(routes.values())}), path)
    return path


@pytest.fixture
def routes(tmp_path: Path) -> pd.Series:
    return read_routes(write_routes(tmp_path / "requests.parquet"))


def test_routes_split_the_hits_by_the_node_their_request_went_to(
    log_path: Path, routes: pd.Series
) -> None:
    res = evaluate_shadow(read_decisions(log_path), trace(), routes=routes)
    where = {n: outcome(res, n)["routed_to"] for n in JUDGED}
    assert where == {"A": "target", "B": "target", "C": "", "D": "source", "E": "", "G": "",
                     "H": "", "I": "elsewhere"}  # fmt: skip
    assert [outcome(res, n)["first_use_node"] for n in ("A", "D", "I")] == [1, 0, 1]
    assert pd.isna(outcome(res, "C")["first_use_node"])  # a miss went nowhere
    s = res.summary
    assert (s["hits_routed_to_target"], s["hits_routed_to_source"],
            s["hits_routed_elsewhere"]) == (2, 1, 1)  # fmt: skip
    assert s["routed_to_target_fraction"] == pytest.approx(2 / 4)
    assert s["routed_to_source_fraction"] == pytest.approx(1 / 4)
    assert s["hit_rate_on_target"] == pytest.approx(2 / 8)
    assert s["hits"] == 4 and s["hit_rate"] == pytest.approx(0.5)  # any node: as before


def test_wasted_bytes_off_target_are_the_bytes_of_every_decision_not_hit_on_its_target(
    log_path: Path, routes: pd.Series
) -> None:
    s = evaluate_shadow(read_decisions(log_path), trace(), routes=routes).summary
    assert s["bytes_wasted"] == BLOCK * (2 + 1 + 1 + 1)  # any node: C, E, G, H
    assert s["bytes_wasted_off_target"] == BLOCK * (2 + 1 + 1 + 1 + 1 + 1)  # and D, I
    assert s["wasted_fraction_off_target"] == pytest.approx(7 / 10)


def test_only_the_first_request_of_a_hit_is_followed_as_the_simulators_copy_fates(
    tmp_path: Path,
) -> None:
    """Block 1 is used at 1000 (routed to node 3) and again at 5000 (to node 1, the target):
    the copy is judged by its first use, as a copy the router passed by once."""
    log = read_decisions(write_log(tmp_path / "d.parquet", [decision(500.0, [1], 1)]))
    res = evaluate_shadow(log, trace(), routes=read_routes(write_routes(tmp_path / "r.parquet")))
    assert res.outcomes["routed_to"].tolist() == ["elsewhere"]
    assert res.summary["hits_routed_to_target"] == 0


def test_the_go_live_rule_and_the_any_node_figures_do_not_depend_on_the_routes(
    log_path: Path, routes: pd.Series
) -> None:
    log = read_decisions(log_path)
    cfg = ShadowConfig(min_covered=0.75, min_hits=1)
    with_routes = evaluate_shadow(log, trace(), cfg, routes=routes).summary
    without = evaluate_shadow(log, trace(), cfg).summary
    assert with_routes["go_live"] == without["go_live"] and without["go_live"]["pass"] is True
    routed = [k for k, v in with_routes.items() if without[k] != v]
    assert sorted(routed) == sorted(ROUTED_KEYS)


ROUTED_KEYS = (
    "hits_routed_to_target", "hits_routed_to_source", "hits_routed_elsewhere",
    "routed_to_target_fraction", "routed_to_source_fraction", "hit_rate_on_target",
    "bytes_wasted_off_target", "wasted_fraction_off_target",
)  # fmt: skip


def test_without_routes_the_target_reading_is_unknown_not_zero(log_path: Path) -> None:
    res = evaluate_shadow(read_decisions(log_path), trace())
    assert all(res.summary[key] is None for key in ROUTED_KEYS)
    assert set(res.outcomes["routed_to"]) == {""} and res.outcomes["first_use_node"].isna().all()


def test_routes_without_a_hits_request_are_refused_naming_it(
    log_path: Path, tmp_path: Path
) -> None:
    other = read_routes(write_routes(tmp_path / "r.parquet", {"0": 1, "2": 0}))
    with pytest.raises(RoutesError, match=r"3 of the 4 hits' requests have no route .*'1'"):
        evaluate_shadow(read_decisions(log_path), trace(), routes=other)


def test_routes_need_the_logs_source_and_target_of_each_copy(
    tmp_path: Path, routes: pd.Series
) -> None:
    schema = SCHEMA.remove(SCHEMA.get_field_index("source"))
    rows = [{k: v for k, v in LOG["A"].items() if k != "source"}]
    log = read_decisions(write_log(tmp_path / "d.parquet", rows, schema))
    assert evaluate_shadow(log, trace()).summary["hits"] == 1  # judged without routes
    with pytest.raises(DecisionLogError, match="no source and target node of each copy"):
        evaluate_shadow(log, trace(), routes=routes)
    unknown = read_decisions(write_log(tmp_path / "n.parquet", [{**LOG["A"], "target": None}]))
    assert evaluate_shadow(unknown, trace()).outcomes["target"].tolist() == [-1]
    with pytest.raises(DecisionLogError, match="no source and target node of each copy"):
        evaluate_shadow(unknown, trace(), routes=routes)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (None, "no such routes file"),
        ({"request_id": ["0"], "where": [1]}, "missing column 'node'"),
        ({"request_id": ["0"], "node": [1.0]}, "column 'node' is double, expected integer"),
        ({"request_id": ["0", "1", "0"], "node": [1, 2, 3]},
         "row 2: request '0' repeats an earlier row's id"),
        ({"request_id": ["0", "1"], "node": [1, None]}, "row 1: request '1' has no request_id"),
    ],
)  # fmt: skip
def test_a_bad_routes_file_is_refused_naming_it(
    tmp_path: Path, table: dict[str, list[Any]] | None, message: str
) -> None:
    path = tmp_path / "routes.parquet"
    if table is not None:
        pq.write_table(pa.table(table), path)
    with pytest.raises(RoutesError) as err:
        read_routes(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
