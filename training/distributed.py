"""Where a model is fitted: this process, a Dask cluster (LightGBM) or Lightning DDP (TCN),
as the train config's ``distributed`` section says."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvcast.training.config import TrainConfig
from kvcast.training.registry import FittedModel, model_kind

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData


def secondary_rank() -> bool:
    """This process is a DDP rank other than the first (started by Lightning, torchrun or
    SLURM): it helps fit the model and leaves; only rank 0 exports, evaluates and tracks."""
    return any(int(os.environ.get(v, "0") or 0) > 0 for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def fit_model(cfg: TrainConfig, data: TrainingData) -> FittedModel:
    """Fit ``cfg.model`` where ``cfg.distributed`` says; a secondary DDP rank exits (status
    0) once the fit is done."""
    d = cfg.distributed
    if d.engine == "dask":
        from kvcast.features.dask_client import dask_client
        from kvcast.training.models.lgbm_dask import fit_on_dask

        with dask_client(d.scheduler, d.workers) as client:
            return fit_on_dask(data, cfg.model, cfg.seed, client, wait_s=d.timeout_s)
    if d.strategy == "ddp":
        from kvcast.training.models.tcn import Ddp, fit

        fitted = fit(data, cfg.model, cfg.seed, ddp=Ddp(d.devices, d.num_nodes, d.timeout_s))
        if secondary_rank():
            raise SystemExit(0)
        return fitted
    return model_kind(cfg.kind).fit(data, cfg.model, cfg.seed)
