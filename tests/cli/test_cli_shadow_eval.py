"""``kvcast shadow-eval`` on the decision log of a real shadow run: the simulator replays the
bundled trace, the real decider (predictive_recency's scorer and Decider) decides on every
tick without acting, and the sidecar's own DecisionLog writes what it decided."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.data import bundled_trace_path
from kvcast.features.events import RequestArrived
from kvcast.features.traces import load_trace
from kvcast.features.traces.dequantize import spread_quantized
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import Command
from kvcast.serving.sidecar.decision_log import DecisionLog
from kvcast.serving.sidecar.decisions import make_decision
from kvcast.serving.sidecar.routes_log import RoutesLog, routes_path
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import Simulator, simulate
from kvcast.simulator.replicating_policy import ReplicatingPolicy
from kvcast.simulator.replication_policies import make_policy

runner = CliRunner()
LOAD = 1.5  # the time-scale of the shadow run (the decider acts, and some of its copies are used)


class ScoreTap:
    """Wraps a scorer; keeps the tick's candidates and probabilities for the log."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self.reset()

    def reset(self) -> None:
        self.cands, self.probs = ChainCandidates.build([]), np.zeros(0)

    def score(self, now_ms: float, candidates: ChainCandidates, sim: Simulator) -> np.ndarray:
        p = np.asarray(self.scorer.score(now_ms, candidates, sim), dtype=float)
        self.cands, self.probs = candidates, p
        return p


class ShadowReplicator:
    """Runs a replicating policy's decider on its tick, logs every command, executes none."""

    def __init__(self, policy: ReplicatingPolicy, log: DecisionLog) -> None:
        self.policy, self.log = policy, log
        self.tick_ms, self.speculative_quota_bytes = policy.tick_ms, policy.speculative_quota_bytes
        self.tap = ScoreTap(policy.inner.scorer)  # type: ignore[attr-defined]
        policy.inner.scorer = self.tap  # type: ignore[attr-defined]
        self.ticks = self.serial = 0

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        self.tap.reset()
        out = []
        for cmd in self.policy.on_tick(now_ms, sim):
            self.serial += 1
            out.append(make_decision(
                cmd, ident=f"sim-{self.serial}", tick=self.ticks, now_ms=now_ms, mode="shadow",
                block_bytes=sim.block_bytes, cands=self.tap.cands, probs=self.tap.probs,
                model="recency",
            ))  # fmt: skip
        self.log.add(out)
        self.ticks += 1
        return []  # shadow: nothing is executed


@pytest.fixture(scope="module")
def shadow_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = SimConfig()
    trace = load_trace(bundled_trace_path("conversation"), name="conversation")
    policy = make_policy("predictive_recency", cfg)
    assert isinstance(policy, ReplicatingPolicy)
    names = tuple(f"node{i}" for i in range(cfg.nodes))
    log = DecisionLog(tmp_path_factory.mktemp("shadow") / "decisions.parquet", names, 256, 3600)
    res = simulate(trace, cfg, policy, time_scale=LOAD, replicator=ShadowReplicator(policy, log))
    log.close()
    res.requests.to_parquet(routes_of(log.path), index=False)  # where each request went
    return log.path


def routes_of(log: Path) -> Path:
    """The shadow run's requests.parquet (request_id, node, ...), beside its log."""
    return log.with_name("requests.parquet")


def brute_force(log: pd.DataFrame, routes: dict[str, int] | None = None) -> dict[str, Any]:
    """The definitions, naively: every judged decision against every request; with
    ``routes`` (request id -> node), where each hit's first request went."""
    tr = spread_quantized(load_trace(bundled_trace_path("conversation")), seed=0)
    reqs = tr.time_scaled(LOAD).requests
    arrivals = reqs["arrival_ms"].to_numpy()
    chains = [set(int(b) for b in c) for c in reqs["block_hashes"]]
    tenants, ids = reqs["tenant"].tolist(), reqs["request_id"].astype(str).tolist()
    hits, leads, wasted, off_target = 0, [], 0, 0
    routed = {"target": 0, "source": 0, "elsewhere": 0}
    for d in log[log["kind"].isin(["replicate", "promote"])].itertuples():
        first = int(d.block_hashes[len(d.block_hashes) - d.blocks_moved])
        uses = [
            (a, i) for i, (a, c, t) in enumerate(zip(arrivals, chains, tenants, strict=True))
            if d.ts_ms < a <= d.ts_ms + d.ttl_ms and first in c and t == d.tenant
        ]  # fmt: skip
        where = ""
        if uses:
            hits += 1
            a, i = min(uses)
            leads.append(a - d.ts_ms)
            if routes is not None:
                node = routes[ids[i]]
                where = {d.target: "target", d.source: "source"}.get(node, "elsewhere")
                routed[where] += 1
        else:
            wasted += d.bytes
        off_target += d.bytes if where != "target" else 0
    return {"hits": hits, "lead": float(np.mean(leads)) if leads else None, "wasted": wasted,
            "routed": routed, "off_target": off_target}  # fmt: skip


def run(*args: str) -> Any:
    return runner.invoke(app, ["shadow-eval", *args])


def test_real_shadow_log_agrees_with_a_brute_force_replay(shadow_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    r = run("--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD), "--json", "--out", str(out))  # fmt: skip
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert json.loads(out.read_text()) == s
    log = pq.read_table(shadow_log).to_pandas()
    judged = int(log["kind"].isin(["replicate", "promote"]).sum())
    assert s["decisions"] == judged > 0  # the real decider acted on the sample
    want = brute_force(log)
    assert s["hits"] == want["hits"]
    assert s["bytes_wasted"] == want["wasted"]
    if want["lead"] is None:
        assert s["mean_lead_time_ms"] is None
    else:
        assert s["mean_lead_time_ms"] == pytest.approx(want["lead"])
    assert s["hit_rate"] == pytest.approx(want["hits"] / judged)
    assert s["evictions"] == int((log["kind"] == "evict").sum())


def test_routes_split_the_real_logs_hits_by_node_as_a_brute_force_replay(
    shadow_log: Path,
) -> None:
    """With the shadow run's requests.parquet as --routes, each hit's first request is
    found on the copy's target, its source or elsewhere, and the target reading's waste
    counts every decision not hit on its target; the any-node figures do not change."""
    args = ["--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD), "--json"]  # fmt: skip
    r = run(*args, "--routes", str(routes_of(shadow_log)))
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    req = pd.read_parquet(routes_of(shadow_log))
    want = brute_force(
        pq.read_table(shadow_log).to_pandas(),
        dict(zip(req["request_id"], req["node"].astype(int), strict=True)),
    )
    got = {k: s[f"hits_routed_{k}"] for k in ("to_target", "to_source", "elsewhere")}
    assert got == {f"to_{k}" if k != "elsewhere" else k: v for k, v in want["routed"].items()}
    assert sum(got.values()) == s["hits"] == want["hits"] > 0
    assert s["hit_rate_on_target"] == pytest.approx(got["to_target"] / s["decisions"])
    assert s["bytes_wasted_off_target"] == want["off_target"]
    assert s["bytes_wasted"] == want["wasted"] <= want["off_target"]
    assert s["routes_file"] == str(routes_of(shadow_log))
    plain = json.loads(run(*args).stdout)
    assert plain["routes_file"] is None and plain["hits_routed_to_target"] is None
    assert {k: v for k, v in plain.items() if v is not None} == {
        k: v for k, v in s.items() if k in plain and plain[k] is not None
    }


def test_a_live_runs_routes_log_beside_its_decision_log_serves_as_routes(
    shadow_log: Path, tmp_path: Path
) -> None:
    """A sidecar writes its routes log (in parts) beside its decision log: --routes takes
    its first part or the directory (which --decisions also takes, reading only the decision
    log) and gives what the same routes give from simulate's requests.parquet."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "decisions.parquet").write_bytes(shadow_log.read_bytes())
    req = pd.read_parquet(routes_of(shadow_log))
    routes = RoutesLog(routes_path(live / "decisions.parquet"), tuple(f"n{i}" for i in range(8)),
                       1000, 3600, rotate_rows=len(req) // 3 + 1)  # fmt: skip
    for i in range(0, len(req), 1000):
        routes.note(RequestArrived(0.0, str(r), int(n), "t", None, 1, 1, ())
                    for r, n in zip(req["request_id"][i:i + 1000], req["node"][i:i + 1000],
                                    strict=True))  # fmt: skip
        routes.maybe_flush()
    routes.close()
    assert len(routes.parts) >= 2
    args = ["--trace", "bundled:conversation", "--time-scale", str(LOAD), "--json"]
    want = json.loads(run("--decisions", str(shadow_log), *args, "--routes",
                          str(routes_of(shadow_log))).stdout)  # fmt: skip
    for decisions, given in ((live, live), (live / "decisions.parquet", routes.path)):
        r = run("--decisions", str(decisions), *args, "--routes", str(given))
        assert r.exit_code == 0, r.output
        s = json.loads(r.stdout)
        assert s["hits_routed_to_target"] is not None and s["routes_file"] == str(given)
        assert {k: v for k, v in s.items() if k not in ("routes_file", "decisions_file")} == {
            k: v for k, v in want.items() if k not in ("routes_file", "decisions_file")
        }
        bare = run("--decisions", str(decisions), *args)  # without --routes: it says to add it
        assert bare.exit_code == 0 and f"--routes {given}" in " ".join(bare.stderr.split())
        assert json.loads(bare.stdout)["hits_routed_to_target"] is None
    alone = run("--decisions", str(shadow_log), *args)  # nothing beside it: no note
    assert alone.exit_code == 0 and "--routes" not in alone.stderr


def test_table_shows_the_target_reading_with_routes_and_says_it_needs_them_without(
    shadow_log: Path,
) -> None:
    args = ["--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD)]  # fmt: skip
    plain = run(*args)
    assert plain.exit_code == 0, plain.output
    lines = {ln.split("│")[1].strip(): ln.split("│")[2].strip()
             for ln in plain.stdout.splitlines() if ln.count("│") == 3}  # fmt: skip
    assert lines["hits routed to target / source / elsewhere"] == "- (needs --routes)"
    assert lines["bytes wasted unless routed to the target"] == "- (needs --routes)"
    r = run(*args, "--routes", str(routes_of(shadow_log)))
    assert r.exit_code == 0, r.output
    s = json.loads(run(*args, "--routes", str(routes_of(shadow_log)), "--json").stdout)
    lines = {ln.split("│")[1].strip(): ln.split("│")[2].strip()
             for ln in r.stdout.splitlines() if ln.count("│") == 3}  # fmt: skip
    counts = f"{s['hits_routed_to_target']:,} / {s['hits_routed_to_source']:,} / "
    assert lines["hits routed to target / source / elsewhere"].startswith(
        counts + f"{s['hits_routed_elsewhere']:,}"
    )
    assert lines["hit rate, request routed to the target"] == (
        f"{s['hits_routed_to_target']:,} ({s['hit_rate_on_target']:.1%})"
    )
    assert lines["bytes wasted unless routed to the target"].startswith(
        f"{s['bytes_wasted_off_target']:,}"
    )
    assert lines["hits (hit rate), request on any node"].startswith(f"{s['hits']:,} (")
    assert r.stdout.strip().splitlines()[-1] == plain.stdout.strip().splitlines()[-1]  # go-live


def test_bad_routes_fail_with_one_line_naming_the_routes_file(
    shadow_log: Path, tmp_path: Path
) -> None:
    args = ["--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD)]  # fmt: skip
    missing = tmp_path / "nope.parquet"
    assert f"{missing}: no such routes file" in one_line_error(run(*args, "--routes", str(missing)))
    few = tmp_path / "few.parquet"
    pd.read_parquet(routes_of(shadow_log)).head(3).to_parquet(few, index=False)
    msg = one_line_error(run(*args, "--routes", str(few)))
    assert msg.startswith(f"error: {few}: ") and "hits' requests have no route" in msg


def test_table_output_ends_with_the_go_live_verdict(shadow_log: Path) -> None:
    r = run("--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "hits (hit rate)" in r.stdout and "bytes wasted" in r.stdout
    verdict = r.stdout.strip().splitlines()[-1]
    assert verdict.startswith(("go-live PASS", "go-live FAIL"))


def test_outcomes_and_plot_are_written_and_agree_with_the_summary(
    shadow_log: Path, tmp_path: Path
) -> None:
    outcomes, plot = tmp_path / "o" / "outcomes.parquet", tmp_path / "p" / "shadow.png"
    r = run("--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD), "--json", "--outcomes", str(outcomes),
            "--plot", str(plot))  # fmt: skip
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    o = pd.read_parquet(outcomes)
    assert len(o) == s["decisions"] and int(o["hit"].sum()) == s["hits"]
    assert int(o.loc[~o["hit"], "bytes"].sum()) == s["bytes_wasted"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_exits_1_when_lead_does_not_cover_transfer(shadow_log: Path, tmp_path: Path) -> None:
    # a decider config whose transfer weight makes every logged transfer last ~forever
    cfg = tmp_path / "decider.yaml"
    cfg.write_text("costs:\n  transfer_weight: 0.000001\n  promote_transfer_weight: 0.000001\n")
    args = ["--decisions", str(shadow_log), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD), "--decider-config", str(cfg), "--json"]  # fmt: skip
    r = run(*args, "--check")
    s = json.loads(r.stdout)
    if s["hits"]:
        assert s["lead_covers_transfer_fraction"] == 0.0 and r.exit_code == 1
    else:
        assert s["go_live"]["pass"] is False and r.exit_code == 1
    assert run(*args).exit_code == 0  # without --check the verdict is only reported


def one_line_error(r: Any) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert lines[0].startswith("error:")
    return " ".join(r.output.split())


def test_bad_inputs_fail_with_one_line_naming_the_file_or_column(
    shadow_log: Path, tmp_path: Path
) -> None:
    trace = ["--trace", "bundled:conversation"]
    missing = tmp_path / "nope.parquet"
    assert "no such decision log" in one_line_error(run("--decisions", str(missing), *trace))
    junk = tmp_path / "junk.parquet"
    junk.write_text("{}")
    assert "not a readable Parquet" in one_line_error(run("--decisions", str(junk), *trace))
    table = pq.read_table(shadow_log)
    dropped = tmp_path / "no_ttl.parquet"
    pq.write_table(table.drop_columns(["ttl_ms"]), dropped)
    msg = one_line_error(run("--decisions", str(dropped), *trace))
    assert "no_ttl.parquet" in msg and "missing column 'ttl_ms'" in msg
    msg = one_line_error(run("--decisions", str(shadow_log), *trace, "--clock-offset-ms", "1e12"))
    assert "decisions.parquet" in msg and "--clock-offset-ms" in msg
    msg = one_line_error(run("--decisions", str(shadow_log), "--trace", str(tmp_path / "x.jsonl")))
    assert "x.jsonl" in msg
    assert "--spread" in one_line_error(run("--decisions", str(shadow_log), *trace,
                                            "--spread", "soon"))  # fmt: skip
    msg = one_line_error(run("--decisions", str(shadow_log), *trace, "--time-scale", "2",
                             "--load-scaling", "users"))  # fmt: skip
    assert "unknown load scaling 'users'" in msg and "sessions" in msg


def test_help_lists_the_options() -> None:
    r = runner.invoke(app, ["shadow-eval", "--help"])
    assert r.exit_code == 0
    for opt in (
        "--decisions",
        "--trace",
        "--clock-offset-ms",
        "--json",
        "--out",
        "--check",
        "--load-scaling",
        "--routes",
    ):
        assert opt in r.output


def test_a_non_finite_clock_offset_is_refused_naming_it(tmp_path: Path) -> None:
    log = tmp_path / "d.parquet"
    log.write_bytes(b"")  # never read: the option is checked first
    r = run("--decisions", str(log), "--trace", "bundled:conversation", "--clock-offset-ms", "nan")
    assert "--clock-offset-ms must be a finite number, got nan" in one_line_error(r)


def test_a_log_without_p_hit_prints_no_nan_and_no_zero_expectation(tmp_path: Path) -> None:
    import pyarrow as pa

    from kvcast.serving.sidecar.decision_log import SCHEMA

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": ts, "input_length": 32, "output_length": 1, "hash_ids": h}) + "\n"
        for ts, h in ((1000, [1, 2]), (5000, [1, 3]))
    ))  # fmt: skip
    row = {name: None for name in SCHEMA.names}
    row |= {"ts_ms": 2000.0, "decision_id": "x-0-1", "kind": "replicate", "tenant": "",
            "block_hashes": [1, 3], "blocks_moved": 1, "bytes": 100, "p_hit": float("nan"),
            "saved_ms": 5.0, "transfer_ms": 10.0, "ttl_ms": 10_000.0}  # fmt: skip
    log = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=SCHEMA), log)
    r = run("--decisions", str(log), "--trace", str(trace), "--spread", "off")
    assert r.exit_code == 0, r.output
    assert "nan" not in r.stdout.lower() and "1 (100.0%)" in r.stdout
    assert "- (1 decisions logged without a P(hit))" in r.stdout


def test_a_part_left_without_footer_by_a_killed_sidecar_is_skipped_with_a_warning(
    shadow_log: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = run_dir / "decisions.parquet"
    first.write_bytes(shadow_log.read_bytes())  # a closed part
    cut = run_dir / "decisions.part-0002.parquet"
    data = shadow_log.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # the part open when the sidecar was killed
    r = run("--decisions", str(first), "--trace", "bundled:conversation",
            "--time-scale", str(LOAD), "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    said = "".join(r.stderr.split())  # rich wraps long lines, even inside a path
    assert f"warning:{cut}:truncated" in said and "itsrowswerelost" in said
    judged = pq.read_table(shadow_log).to_pandas()["kind"].isin(["replicate", "promote"]).sum()
    assert json.loads(r.stdout)["decisions"] == judged
