"""Write the notebooks of this folder from the cells below (outputs cleared).

Run ``python notebooks/make_notebooks.py`` after editing a cell here; the ``.ipynb`` files are
generated, never edited by hand (``tests/notebooks`` checks they match this script). Every
notebook runs end to end on the bundled trace samples, in a minute or less on two cores, and
writes nothing outside a temporary directory, which it removes before it ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

HERE = Path(__file__).resolve().parent
Cell = tuple[str, str]  # ("md" | "py", source)


def md(text: str) -> Cell:
    return ("md", text.strip("\n"))


def py(text: str) -> Cell:
    return ("py", text.strip("\n"))


def params(text: str) -> Cell:
    """The notebook's parameters: a code cell tagged ``parameters`` (papermill's ``-p NAME
    VALUE`` overrides them; by hand, edit the cell)."""
    return ("params", text.strip("\n"))


TRACE_EXPLORATION: list[Cell] = [
    md("""
# Trace exploration: arrival bursts, reuse gaps, prefix trees

The bundled samples are excerpts of the Mooncake FAST'25 traces: `conversation` is the
first 10 minutes of the conversation trace (1,750 requests), `synthetic` the first 1,000
requests of the synthetic trace (about 4.5 minutes); see `kvcast/data/traces/NOTICE.md`. One
row per request with its arrival, token counts and the hash of each 512-token prompt block.
A block is *bursty* when several requests that contain it arrive close together: that is what
kvcast predicts (`burst(b, t) = 1` if at least `k` requests containing `b` arrive in
`(t, t + H]`, H = 30 s by default).

To explore your own traces, set `TRACES` in the parameters cell below (or run the notebook with
papermill: `papermill 01_trace_exploration.ipynb out.ipynb -p TRACES '["my.jsonl"]'`).
"""),
    params("""
# the traces to explore: bundled:NAME or a trace file (Mooncake JSONL, Azure CSV, Parquet)
TRACES = ["bundled:conversation", "bundled:synthetic"]
TREE_TRACE = TRACES[0]  # the one whose prefix tree is drawn
H_MS = 30_000.0  # the label window
"""),
    py("""
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kvcast.data import trace_file
from kvcast.features.traces import load_trace
from kvcast.features.traces.dequantize import detect_quantum_ms, spread_quantized


def named(spec):  # the trace's file and its name (a bundled sample's, else the file's stem)
    path, name = trace_file(spec)
    return path, name or path.stem


traces = {name: load_trace(path, name=name) for path, name in map(named, TRACES)}
overview = pd.DataFrame(
    {
        name: {
            "requests": len(t),
            "minutes": t.duration_ms / 60_000,
            "block tokens": t.block_size,
            "mean input tokens": t.requests["input_tokens"].mean(),
            "mean blocks / request": t.requests["block_hashes"].map(len).mean(),
            "timestamp quantum (ms)": detect_quantum_ms(t.requests["arrival_ms"].to_numpy()),
        }
        for name, t in traces.items()
    }
).T
overview
"""),
    md("""
## Arrival bursts

Mooncake's conversation trace records arrivals on a ~3 s grid; the simulator spreads the
requests of one timestamp uniformly across the quantum (`spread_quantized`), and so do we
here. The peak-to-mean ratio and the coefficient of variation of per-window counts show how
far the traffic is from a smooth (Poisson) stream: for Poisson arrivals the CV of the counts
is `1 / sqrt(mean)`.
"""),
    py("""
fig, axes = plt.subplots(len(traces), 1, figsize=(10, 3 * len(traces)), sharex=True)
rows = {}
for ax, (name, t) in zip(np.atleast_1d(axes), traces.items(), strict=True):
    arr = spread_quantized(t, seed=0).requests["arrival_ms"].to_numpy() / 1000.0
    arr = arr - arr.min()  # seconds into the trace, wherever its clock starts
    for width, style in ((1, "-"), (10, "-")):
        edges = np.arange(0, arr.max() + width, width)
        counts, _ = np.histogram(arr, edges)
        ax.step(
            edges[:-1],
            counts / width,
            style,
            where="post",
            label=f"{width} s bins",
            alpha=0.5 if width == 1 else 1.0,
        )
        rows[(name, f"{width} s")] = {
            "mean req/s": counts.mean() / width,
            "peak req/s": counts.max() / width,
            "peak / mean": counts.max() / counts.mean(),
            "CV of counts": counts.std() / counts.mean(),
            "Poisson CV": 1 / np.sqrt(counts.mean()),
        }
    ax.set(title=name, ylabel="requests / s")
    ax.legend(fontsize=8)
np.atleast_1d(axes)[-1].set_xlabel("trace time (s)")
fig.tight_layout()
pd.DataFrame(rows).T.round(2)
"""),
    md("""
## Reuse gaps

For every use of a block, the time until the next request that contains the same block.
The share of gaps below H is the share of uses followed by a burst label of `k = 1`; a
gap far beyond H is a block that a replica would have to survive in HBM for a long time.
"""),
    py("""
def block_uses(t):
    df = t.requests
    n = df["block_hashes"].map(len).to_numpy()
    u64 = (int(b) & 0xFFFF_FFFF_FFFF_FFFF for chain in df["block_hashes"] for b in chain)
    blocks = np.fromiter(u64, np.uint64, n.sum())  # vLLM's u64 hashes, or negative int64 ones
    arr = np.repeat(df["arrival_ms"].to_numpy(), n)
    order = np.lexsort((arr, blocks))
    return blocks[order], arr[order]


def reuse_gaps(t):
    blocks, arr = block_uses(spread_quantized(t, seed=0))
    same = blocks[1:] == blocks[:-1]
    return np.diff(arr)[same]


gaps = {name: reuse_gaps(t) for name, t in traces.items()}
fig, ax = plt.subplots(figsize=(7, 4))
for name, g in gaps.items():
    v = np.sort(np.maximum(g, 1.0)) / 1000.0
    ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name)
ax.axvline(H_MS / 1000, color="grey", linestyle="--", label="H = 30 s")
ax.set(
    xscale="log",
    xlabel="gap to the block's next use (s, log)",
    ylabel="fraction of reuses",
    title="reuse-gap CDF",
)
ax.legend()
fig.tight_layout()
pd.DataFrame(
    {
        name: {
            "reuses": len(g),
            "p10 s": np.quantile(g, 0.1) / 1e3,
            "p50 s": np.quantile(g, 0.5) / 1e3,
            "p90 s": np.quantile(g, 0.9) / 1e3,
            "share <= H": float(np.mean(g <= H_MS)),
        }
        for name, g in gaps.items()
    }
).T.round(3)
"""),
    md("""
## How predictable is the next use

A copy made ahead of a request pays only if the request comes while the copy lives. Among
requests whose prefix has been idle for X s, the share used again within the window is the
precision of the best rule that knows only idle time (`kvcast trace reuse`). The decider acts
on a DRAM-to-HBM promotion only above P of about 0.38 with the default costs; well below
that at every age, only features that tell chains apart can make prediction pay. Beside the
two samples, ten minutes of the agent workload that `kvcast trace agent` writes (the next
call follows each tool's run, seconds later): the case the source documents expect
prediction to pay on.
"""),
    py("""
from kvcast.features.traces.agent_config import AgentTraceConfig
from kvcast.features.traces.agent_trace import agent_trace
from kvcast.features.traces.reuse import draw_hazard, reuse_hazard

ages_s = [0, 15, 30, 60, 120, 240]
idle_ms = [a * 1e3 for a in ages_s]
hazards = {
    name: reuse_hazard(spread_quantized(t, seed=0).requests, window_ms=H_MS, idle_ms=idle_ms)
    for name, t in traces.items()
}
agent = agent_trace(AgentTraceConfig(duration_s=600.0))
hazards["agent (generated)"] = reuse_hazard(agent, window_ms=H_MS, idle_ms=idle_ms)
fig, ax = plt.subplots(figsize=(7, 4))
draw_hazard(ax, hazards)
ax.set_title("reuse hazard")
fig.tight_layout()
pd.DataFrame(
    {name: [r.p for r in h.rows] for name, h in hazards.items()},
    index=pd.Index(ages_s, name="idle s"),
).round(3)
"""),
    md("""
## Prefix trees

Each request's block chain is a path from a root in the prefix tree of the trace; requests
that share a prefix share its KV blocks. Nodes are keyed by (parent node, block), so the tree
is exact even if one block hash appeared under two different parents. Below: how many nodes
and requests each depth has, how much of each prompt an *earlier* request already computed
(the ceiling of any prefix cache), and the busiest subtree.
"""),
    py("""
def prefix_tree(t):
    # the tree as a table (one row per node), and per request the share of its chain that
    # was already in the tree when it arrived
    index, count, parent, depth, shared = {}, [], [], [], []
    for chain in t.requests["block_hashes"]:
        node, seen = -1, 0
        for b in chain:
            key = (node, int(b))
            nxt = index.get(key)
            if nxt is None:
                nxt = index[key] = len(count)
                count.append(0)
                parent.append(node)
                depth.append(depth[node] + 1 if node >= 0 else 0)
            seen += count[nxt] > 0
            count[nxt] += 1
            node = nxt
        shared.append(seen / max(len(chain), 1))
    tree = pd.DataFrame({"parent": parent, "depth": depth, "requests": count})
    return tree, np.array(shared)


trees, shared = {}, {}
for name, t in traces.items():
    trees[name], shared[name] = prefix_tree(t)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for name, tree in trees.items():
    by_depth = tree.groupby("depth").agg(nodes=("requests", "size"), requests=("requests", "sum"))
    ax1.plot(by_depth.index, by_depth["nodes"], label=f"{name}: nodes")
    ax1.plot(
        by_depth.index,
        by_depth["requests"] / by_depth["nodes"],
        "--",
        label=f"{name}: requests per node",
    )
    ax2.hist(shared[name], bins=20, range=(0, 1), alpha=0.6, label=name)
ax1.set(
    xlabel="depth (blocks)",
    ylabel="nodes (solid) / requests per node (dashed), log",
    yscale="log",
    title="prefix tree by depth",
)
ax2.set(
    xlabel="share of the prompt an earlier request computed",
    ylabel="requests",
    title="prefix reuse per request",
)
ax1.legend(fontsize=8)
ax2.legend()
fig.tight_layout()
pd.DataFrame(
    {
        name: {
            "nodes": len(tree),
            "roots": int((tree["parent"] < 0).sum()),
            "max depth": int(tree["depth"].max()),
            "nodes used by >= 2 requests": int((tree["requests"] >= 2).sum()),
        }
        for name, tree in trees.items()
    }
).T
"""),
    py("""
import networkx as nx

tree = trees[named(TREE_TRACE)[1]]
children = tree.groupby("parent").groups
# the node below the roots where the most reused branches fork (the roots fork too much)
forks = tree[tree["requests"] >= 2].groupby("parent").size()
forks = forks[(forks.index >= 0) & (tree["depth"].reindex(forks.index) > 0).to_numpy()]
top = int(forks.idxmax())
g, frontier = nx.DiGraph(), [int(top)]
g.add_node(int(top), layer=0)
for level in range(1, 6):  # five levels; at most 4 children per node, each used >= 2 times
    nxt = []
    for n in frontier:
        kids = tree.loc[list(children.get(n, []))]
        for c in kids[kids["requests"] >= 2].nlargest(4, "requests").index:
            g.add_node(int(c), layer=level)
            g.add_edge(n, int(c))
            nxt.append(int(c))
    frontier = nxt
pos = nx.multipartite_layout(g, subset_key="layer")
counts = {n: int(tree.at[n, "requests"]) for n in g.nodes}
fig, ax = plt.subplots(figsize=(10, 5))
nx.draw(
    g,
    pos,
    ax=ax,
    node_size=[30 + 3 * counts[n] for n in g.nodes],
    arrows=False,
    node_color="tab:blue",
    alpha=0.7,
    labels=counts,
    font_size=7,
)
depth0 = int(tree.at[top, "depth"])
ax.set_title(
    f"where reused prefixes fork most: the subtree below depth {depth0}, 5 levels, "
    "top 4 children (label: requests through the node)"
)
fig.tight_layout()
"""),
]


MODEL_EVALUATION: list[Cell] = [
    md("""
# Model evaluation: PR curves, reliability, feature importance

Trains the `recency` baseline, the `rule` model and the LightGBM model on the bundled
conversation sample with the training API (the same path as
`python training/train.py --config configs/train/<kind>.yaml`), with MLflow tracking off and
every artefact in a temporary directory. All scores are the *served* ones: the test window
is scored through each exported ONNX file by `OnnxScorer`, calibration included.

To evaluate registered models instead, point `MLFLOW_TRACKING_URI` at your store and load
`models:/kvcast-lgbm@champion` with `kvcast.predictor.model_uri.download_model`. Another trace:
set `TRACE` in the parameters cell below (or `papermill -p TRACE my.jsonl`).
"""),
    params("""
TRACE = "bundled:conversation"  # bundled:NAME or a trace file: trained and tested on it
KINDS = ("recency", "rule", "lgbm")
"""),
    py("""
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm without ipywidgets
"""),
    py("""
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kvcast.config import parse_config
from kvcast.predictor.metrics import average_precision
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.config import TrainConfig
from kvcast.training.evaluate import predict_rows
from kvcast.training.pipeline import load_data, run_training
from kvcast.training.registry import model_kind
from kvcast.training.reliability import reliability_bins
from kvcast.training.report import pr_steps

%matplotlib inline

work_dir = tempfile.TemporaryDirectory(prefix="kvcast-nb-")  # the last cell removes it
work = Path(work_dir.name)
cfgs = {
    kind: parse_config(
        TrainConfig,
        {
            "data": {"trace": TRACE},
            "model": {"kind": kind},
            "tracking": {"enabled": False},
            "out_dir": str(work / kind),
        },
        source="notebook",
    )
    for kind in KINDS
}
data = load_data(cfgs["lgbm"])  # one replay and feature table, shared by every kind
pd.Series(data.describe()).to_frame("training table")
"""),
    py("""
results = {kind: run_training(cfg, data=data) for kind, cfg in cfgs.items()}
pd.DataFrame({kind: r.metrics["test"] for kind, r in results.items()}).T
"""),
    md("""
## Precision-recall on the test window

The test window is the last 20% of the decision ticks (purged of rows whose label window
crosses a split boundary); rows carry the negative-sampling weights, so precision is that of
the full population.
"""),
    py("""
te = data.rows("test")
y, w = data.y[te], data.w[te]
probs = {}
for kind, r in results.items():
    scorer = OnnxScorer.load(r.model_path, expected=data.spec)
    probs[kind] = predict_rows(scorer.score, data.x, te)
fig, ax = plt.subplots(figsize=(6, 4.5))
for kind, p in probs.items():
    rec, prec = pr_steps(y, w, p)  # steps: the area under each is its AP
    ax.step(rec, prec, where="pre", label=f"{kind} (AP {average_precision(y, p, w):.3f})")
base = float(np.sum(w * y) / np.sum(w))
ax.axhline(base, color="grey", linestyle=":", label=f"base rate {base:.3f}")
ax.set(xlabel="recall", ylabel="precision", title="precision-recall, test window")
ax.legend()
fig.tight_layout()
"""),
    md("""
## Reliability diagram

The decider multiplies `P(hit)` by the time a hit saves, so the probabilities must be
calibrated, not only well ranked. Points on the diagonal are calibrated. The bins are
equal-mass, as in the training report (`kvcast.training.reliability`,
`evaluation.reliability_bins: quantile`): each holds about 1/15 of the test window's weight,
so the points sit where the burst probabilities are (mostly below 0.2) instead of one point
there and a few sparse ones elsewhere; the axes end just past the largest point. The legend's
ECE is over these bins (`ece_quantile` in the metrics table above; `ece` keeps equal-width
bins). Below: where the weight lies (weighted histogram of the predictions; the last bar
holds everything beyond the axis).
"""),
    py("""
BINS = cfgs["lgbm"].evaluation.ece_bins  # 15, as the recorded ece and ece_quantile
rels = {kind: reliability_bins(y, p, w, BINS, "quantile") for kind, p in probs.items()}
top = min(1.0, 1.1 * max(0.05, *(x for r in rels.values() for x in (*r.mean_p, *r.rate))))
fig, (ax, axw) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, height_ratios=(3, 1))
ax.plot([0, top], [0, top], color="grey", linestyle="--", label="perfect")
for kind, rel in rels.items():
    ax.plot(rel.mean_p, rel.rate, marker="o", label=f"{kind} (ECE {rel.ece:.3g})")
    axw.hist(
        np.minimum(probs[kind], top),  # beyond the axis: in the last bar
        bins=np.linspace(0, top, 31),
        weights=w / w.sum(),
        histtype="step",
        label=kind,
    )
ax.set(
    ylabel="observed burst rate",
    title=f"reliability, test window ({BINS} equal-mass bins)",
    xlim=(0, top),
    ylim=(0, top),
)
axw.set(xlabel="predicted probability (points: bin mean)", ylabel="weight share")
ax.legend()
fig.tight_layout()
"""),
    md("""
## Feature importance

The rule model's importance is each signal's weight times the share of validation rows it
fires on, split between the features the signal reads; LightGBM's is the total split gain.
(The fitted models are refitted here: the training run keeps only the ONNX file and a plot.)
"""),
    py("""
fig, axes = plt.subplots(1, 2, figsize=(12, 5))
for ax, kind in zip(axes, ("rule", "lgbm"), strict=True):
    fitted = model_kind(kind).fit(data, cfgs[kind].model, cfgs[kind].seed)
    imp = pd.Series(fitted.importance(data)).sort_values().tail(15)
    ax.barh(imp.index, imp.to_numpy())
    ax.set(title=f"{kind}: feature importance", xlabel="importance")
fig.tight_layout()
"""),
    md("""
## Clean up

The trained models and their reports go with the temporary directory.
"""),
    py("""
work_dir.cleanup()
"""),
]


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

NOTEBOOKS: dict[str, list[Cell]] = {
    "01_trace_exploration.ipynb": TRACE_EXPLORATION,
    "02_model_evaluation.ipynb": MODEL_EVALUATION,
    "03_policy_comparison.ipynb": POLICY_COMPARISON,
}


def build(cells: list[Cell]) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, src) in enumerate(cells):
        new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        cell = new(src)
        if kind == "params":
            cell.metadata["tags"] = ["parameters"]
        cell["id"] = f"cell-{i:02d}"  # stable ids: regenerating changes nothing
        nb.cells.append(cell)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(NOTEBOOKS[name])) + "\n"


def main(out_dir: Path = HERE) -> None:
    for name in NOTEBOOKS:
        (out_dir / name).write_text(render(name))
        print(out_dir / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
