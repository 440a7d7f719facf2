"""The cells of ``02_model_evaluation.ipynb``: trains the recency, rule and LightGBM models
and scores the test window through their ONNX files: precision-recall, reliability, feature
importance."""

from __future__ import annotations

from notebook_cells.cell import Cell, md, params, py

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
