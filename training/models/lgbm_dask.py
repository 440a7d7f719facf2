"""LightGBM trained on a Dask cluster (``lightgbm.dask``, data-parallel tree learner).

Same inputs and parameters as :func:`kvcast.training.models.lgbm.fit` (weights, monotone
constraints, blanked features); the training rows are shuffled and split into one chunk per
worker.
``lightgbm.dask`` has no early stopping (each worker would decide alone), so the booster grows
all ``num_boost_round`` trees and the early-stopping rule is applied afterwards on the
validation window, on the client: the same metric, the same patience, the same best iteration
as the local fit would have stopped at.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import lightgbm as lgb
import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from kvcast.features.dask_client import worker_addresses
from kvcast.training.models.lgbm import LgbmInputs, LgbmModel, fit_inputs, fitted_model
from kvcast.training.models.params import LgbmParams

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData

HIGHER_IS_BETTER = {"binary_logloss": False, "auc": True, "average_precision": True}


def _metric(name: str, y: np.ndarray, w: np.ndarray, raw: np.ndarray) -> float:
    p = 1.0 / (1.0 + np.exp(-raw))
    if name == "binary_logloss":
        p = np.clip(p, 1e-15, 1 - 1e-15)
        return float(-np.sum(w * (y * np.log(p) + (1 - y) * np.log1p(-p))) / np.sum(w))
    if len(np.unique(y)) < 2:
        return float("nan")
    if name == "auc":
        return float(roc_auc_score(y, p, sample_weight=w))
    return float(average_precision_score(y, p, sample_weight=w))


def validation_curve(
    booster: lgb.Booster, inp: LgbmInputs, params: LgbmParams
) -> tuple[int, dict[str, list[float]]]:
    """(best iteration by the early-stopping rule, per-iteration validation metrics)."""
    names = inp.config["metric"]
    history: dict[str, list[float]] = {f"val_{m}": [] for m in names}
    raw = np.zeros(len(inp.yv))
    first, higher = names[0], HIGHER_IS_BETTER[names[0]]
    best, best_score = 0, -math.inf if higher else math.inf
    for k in range(booster.current_iteration()):
        raw += booster.predict(inp.xv, raw_score=True, start_iteration=k, num_iteration=1)
        for m in names:
            history[f"val_{m}"].append(_metric(m, inp.yv, inp.wv, raw))
        score = history[f"val_{first}"][-1]
        if (score > best_score) if higher else (score < best_score):
            best, best_score = k + 1, score
        elif k + 1 - best >= params.early_stopping_rounds:
            break
    return best or booster.current_iteration(), history


MIN_ROWS_PER_WORKER = 2


def _workers(client: Any, wait_s: float) -> list[str]:
    """The cluster's workers; with none yet (a cluster still starting them, or scaled to
    zero), wait up to ``wait_s`` for one, then fail naming the scheduler."""
    workers = worker_addresses(client)
    if not workers:
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            address = getattr(client.scheduler, "address", client.scheduler)
            raise ValueError(
                f"the Dask cluster at {address} has no workers (waited "
                f"distributed.timeout_s={wait_s:g} s): start some, or set distributed.scheduler "
                "to a cluster that has them"
            ) from None
        workers = worker_addresses(client)
    return workers


def _chunks(client: Any, inp: LgbmInputs, seed: int, wait_s: float) -> tuple[Any, Any, Any]:
    """The training rows as Dask arrays, chunk ``i`` held by the ``i``-th worker (by address):
    the rows are shuffled first, so that every chunk, from which its worker finds some
    features' bins, spans the whole training window rather than one stretch of time."""
    import dask
    import dask.array as da

    workers = _workers(client, wait_s)
    # a worker fits on 2 rows at least (LightGBM's scikit-learn check): fewer chunks than
    # workers when the training window is that short (lightgbm.dask trains on the rest)
    workers = workers[: max(1, min(len(workers), len(inp.yt) // MIN_ROWS_PER_WORKER))]
    mix = np.random.default_rng(seed).permutation(len(inp.yt))
    out: list[list[Any]] = [[], [], []]
    for rows, worker in zip(np.array_split(mix, len(workers)), workers, strict=True):
        for parts, arr in zip(out, (inp.xt, inp.yt, inp.wt), strict=True):
            chunk = arr[rows]
            fut = client.scatter(chunk, workers=[worker])  # keyed by content: same ranks
            parts.append(da.from_delayed(dask.delayed(fut), chunk.shape, chunk.dtype))
    x, y, w = (da.concatenate(p) for p in out)
    return x, y, w


def fit_on_dask(
    data: TrainingData, params: LgbmParams, seed: int, client: Any, wait_s: float = 300.0
) -> LgbmModel:
    """``wait_s``: how long to wait for a worker when the cluster has none yet."""
    from lightgbm.dask import DaskLGBMClassifier

    inp = fit_inputs(data, params, seed)
    x, y, w = _chunks(client, inp, seed, wait_s)
    config = {k: v for k, v in inp.config.items() if k not in ("metric", "first_metric_only")}
    config["num_threads"] = params.num_threads
    model = DaskLGBMClassifier(
        client=client, n_estimators=params.num_boost_round, tree_learner="data", **config
    )
    model.fit(x, y, sample_weight=w, feature_name=list(data.spec.names))
    booster = model.booster_
    best, history = validation_curve(booster, inp, params)
    fitted = fitted_model(booster, best, data.spec.names, inp, history)
    n = x.numblocks[0]
    fitted.info["engine"] = f"lightgbm.dask ({n} worker{'s' if n > 1 else ''})"
    return fitted
