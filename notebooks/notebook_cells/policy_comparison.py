"""The cells of ``03_policy_comparison.ipynb``: the policies of its parameters across loads,
the evaluation table, the goal's checks and the plots."""

from __future__ import annotations

from notebook_cells.cell import Cell, md, params, py

POLICY_COMPARISON: list[Cell] = [
    md("""
# Policy comparison: anchors' routers, the oracle and predictive replication

Replays the bundled conversation sample through the default 8-node Llama-3-70B cluster
(100 Gb/s links at 87% efficiency, the length-aware TTFT SLO) under four of the anchors'
routers, the `oracle` (knows future arrivals; same budgets) and `predictive_recency` (the
decider fed by an online recency scorer), at three loads. This is
`kvcast evaluate --trace bundled:conversation --policies ... --time-scale 0.5,1,2` in Python.
Another trace, other policies or loads: the parameters cell below (or `papermill -p TRACE ...`).
"""),
    params("""
TRACE = "bundled:conversation"  # bundled:NAME or a trace file
POLICIES = [
    "round_robin",
    "dynamo_kv",
    "llmd_precise",
    "mooncake_conductor",
    "oracle",
    "predictive_recency",
]
LOADS = [0.5, 1.0, 2.0]  # time-scales: 2 = twice the arrival rate
# any registered policies (`kvcast policies`): the routers among them are the anchors, the
# replicating ones (the oracle, predictive_*) are measured against them
"""),
    py("""
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Image, display

from kvcast.data import trace_file
from kvcast.features.traces import load_trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.evaluation import evaluate
from kvcast.simulator.plots import plot_p99_vs_load, plot_ttft_cdf
from kvcast.simulator.replication_policies import is_replicating

%matplotlib inline

path, name = trace_file(TRACE)
trace = load_trace(path, name=name or path.stem)
cfg = SimConfig()
t0 = time.perf_counter()
ev = evaluate(trace, cfg, POLICIES, LOADS)
print(f"{len(ev.summaries)} simulations in {time.perf_counter() - t0:.1f} s")
"""),
    md("""
## The evaluation table

One row per (policy, load); the keys are those of `summary.json` (DESIGN.md section 5).
"""),
    py("""
table = pd.DataFrame(
    [
        {
            "policy": s["policy"],
            "load x": s["time_scale"],
            "TTFT p50 ms": s["ttft_ms"]["p50"],
            "TTFT p99 ms": s["ttft_ms"]["p99"],
            "SLO ok": s["slo_attainment"],
            "goodput rps": s["goodput_rps"],
            "prefix hit": s["prefix_hit_ratio"],
            "pulled GB": s["bytes_pulled"] / 1e9,
            "replicated GB": s["bytes_replicated"] / 1e9,
            "wasted GB": s["bytes_wasted"] / 1e9,
            "replication hit rate": s["replication_hit_rate"],
            "mean lead ms": s["mean_lead_time_ms"],
            "active evictions by spec.": s["active_evictions_by_speculative"],
        }
        for s in ev.summaries
    ]
)
table.round(3)
"""),
    py("""
p50 = table.pivot(index="policy", columns="load x", values="TTFT p50 ms").loc[POLICIES]
anchors = [p for p in POLICIES if not is_replicating(p)]  # the routers (the oracle replicates)
if anchors:
    vs_best = (p50 / p50.loc[anchors].min() - 1).map(lambda x: f"{x:+.1%}")
else:  # no router among POLICIES: nothing to compare with
    vs_best = p50.map(lambda x: "no anchor")
pd.concat({"TTFT p50 ms": p50.round(0), "vs best anchor": vs_best}, axis=1)
"""),
    md("""
## Against the goal

The predictive-replication goal (`configs/goals/predictive-replication.yaml`), judged from
these summaries as `kvcast verdict` does: each check's figure and `ok`, `MISS`, or `?` where
these runs cannot decide it. The capacity checks need each policy's capacity and the best
router's capacity load: `kvcast evaluate --verdict` searches and runs them.
"""),
    py("""
from kvcast.simulator.goal_config import GoalConfig
from kvcast.simulator.verdict import judge

MARK = {True: "ok", False: "MISS", None: "?"}
[group] = judge(ev.summaries, GoalConfig())
pd.DataFrame(
    {
        f"{p.label} on {p.router}": {c.name: f"{c.value} {MARK[c.met]}" for c in p.checks}
        for p in group.policies
    }
).fillna("n/a")  # a check that does not apply (the oracle's share of the oracle's gain)
"""),
    md("""
## Plots

The TTFT CDF at load 1 and P99 TTFT / SLO attainment against load, as `kvcast evaluate`
writes them, then what the replicating policies moved.
"""),
    py("""
with tempfile.TemporaryDirectory(prefix="kvcast-nb-") as tmp:  # Image reads each file now
    plots = Path(tmp)
    display(Image(filename=str(plot_ttft_cdf(ev, plots / "ttft_cdf.png", time_scale=1.0))))
    display(Image(filename=str(plot_p99_vs_load(ev, plots / "p99_vs_load.png"))))
"""),
    py("""
replicating = [p for p in POLICIES if is_replicating(p)]
rep = table[table["policy"].isin(replicating)]
if rep.empty:
    print("no replicating policy among POLICIES: nothing was replicated")
else:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in rep.groupby("policy", sort=False):
        ax1.plot(rows["load x"], rows["replicated GB"], marker="o", label=f"{name}: replicated")
        ax1.plot(
            rows["load x"], rows["wasted GB"], marker="x", linestyle="--", label=f"{name}: wasted"
        )
        ax2.plot(rows["load x"], rows["replication hit rate"], marker="o", label=name)
    ax1.set(xlabel="load x", ylabel="GB", title="speculative bytes")
    ax2.set(
        xlabel="load x",
        ylabel="share of replications used",
        title="replication hit rate",
        ylim=(0, 1),
    )
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
"""),
]
