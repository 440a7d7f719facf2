"""The cells of ``01_trace_exploration.ipynb``: arrival bursts, reuse gaps, how predictable
a prefix's next use is from its idle time, and prefix trees, on the traces of its parameters."""

from __future__ import annotations

from notebook_cells.cell import Cell, md, params, py

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
