"""Time-series model: a small temporal convolution over each block's last L feature rows.

Trained with a PyTorch Lightning ``Trainer`` on CPU (deterministic seed, few epochs);
exported with ``torch.onnx`` (input ``[n, L, F]``). Windows come from the unsampled table
(``data.negative_keep: 1.0``; a sampled table is refused: which rows exist would leak their
labels into the history). Training targets are every positive and ``train_negative_keep`` of
the negatives (weighted back), capped at ``max_train_windows``.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import onnx
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from kvcast.predictor.windows import gather_windows
from kvcast.training.models.onnx_graph import INPUT, OUTPUT
from kvcast.training.models.params import TcnParams
from kvcast.training.models.tcn_net import TcnNet
from kvcast.training.models.weighting import class_balanced

if TYPE_CHECKING:
    from kvcast.training.data import TrainingData


class TcnModule(pl.LightningModule):
    def __init__(self, net: TcnNet, learning_rate: float) -> None:
        super().__init__()
        self.net, self.learning_rate = net, learning_rate
        self.history: dict[str, list[float]] = {"train_loss": [], "val_loss": []}
        self._sums: dict[str, list[float]] = {"train_loss": [0.0, 0.0], "val_loss": [0.0, 0.0]}

    def _loss(self, batch: list[torch.Tensor], key: str) -> torch.Tensor:
        x, y, w = batch
        bce = nn.functional.binary_cross_entropy_with_logits(self.net(x), y, reduction="none")
        total = (bce * w).sum()
        self._sums[key][0] += float(total.detach())
        self._sums[key][1] += float(w.sum())
        return total / w.sum()

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        return self._loss(batch, "train_loss")

    def validation_step(self, batch: list[torch.Tensor], _: int) -> None:
        self._loss(batch, "val_loss")

    def _epoch_end(self, key: str) -> None:
        total, weight = self._sums[key]
        if self.trainer.world_size > 1:  # each DDP process saw its share: the whole window's
            sums = torch.tensor([total, weight], dtype=torch.float64)
            total, weight = self.trainer.strategy.reduce(sums, reduce_op="sum").tolist()
        if weight > 0:
            self.history[key].append(total / weight)
        self._sums[key] = [0.0, 0.0]

    def on_train_epoch_end(self) -> None:
        self._epoch_end("train_loss")

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val_loss")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


@dataclass
class TcnModel:
    net: TcnNet
    window: int
    n_features: int
    kind: str = "tcn"
    output: str = "logit"
    missing: str = "NaN features are imputed in-graph with training medians"
    history: dict[str, list[float]] = field(default_factory=dict)
    world_size: int = 1  # training processes (DDP: devices x nodes)

    def predict_raw(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net.eval()(torch.from_numpy(np.asarray(x, np.float32))).numpy()

    def to_onnx(self) -> onnx.ModelProto:
        buf = io.BytesIO()
        dummy = torch.zeros(2, self.window, self.n_features)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                self.net.eval(),
                (dummy,),
                buf,
                dynamo=False,
                input_names=[INPUT],
                output_names=[OUTPUT],
                dynamic_axes={INPUT: {0: "n"}, OUTPUT: {0: "n"}},
                opset_version=17,
            )
        return onnx.load_from_string(buf.getvalue())

    def summary(self) -> dict[str, Any]:
        params = sum(p.numel() for p in self.net.parameters())
        return {"parameters": params, "world_size": self.world_size}

    def importance(self, data: TrainingData) -> dict[str, float]:
        """Permutation importance: rise of the weighted log-loss on <= 4,096 validation rows."""
        rng = np.random.default_rng(0)
        va = data.rows("validation")
        idx = np.sort(rng.choice(va, min(len(va), 4096), replace=False))
        x = gather_windows(data.x, data.window_index(self.window)[idx])
        y, w = data.y[idx].astype(np.float64), data.w[idx]

        def loss(z: np.ndarray) -> float:
            p = np.clip(1 / (1 + np.exp(-self.predict_raw(z))), 1e-7, 1 - 1e-7)
            return float(-np.sum(w * (y * np.log(p) + (1 - y) * np.log1p(-p))) / w.sum())

        base, out = loss(x), {}
        for j, name in enumerate(data.spec.names):
            z = x.copy()
            z[:, :, j] = z[rng.permutation(len(z)), :, j]
            out[name] = max(loss(z) - base, 0.0)
        return out


def _targets(data: TrainingData, params: TcnParams, rng: np.random.Generator) -> np.ndarray:
    tr = data.rows("train")
    keep = (data.y[tr] > 0) | (rng.random(len(tr)) < params.train_negative_keep)
    idx = tr[keep]
    if len(idx) > params.max_train_windows:
        idx = np.sort(rng.choice(idx, params.max_train_windows, replace=False))
    return idx


def _tensors(data: TrainingData, idx: np.ndarray, w: np.ndarray, window: int) -> TensorDataset:
    x = gather_windows(data.x, data.window_index(window)[idx])
    return TensorDataset(
        torch.from_numpy(x),
        torch.from_numpy(data.y[idx].astype(np.float32)),
        torch.from_numpy(w.astype(np.float32)),
    )


class Ddp(NamedTuple):
    """Where a DDP fit runs: ``devices`` processes per node on ``num_nodes`` nodes; every wait
    on the other ranks (the process group forming, each collective) ends after ``timeout_s``."""

    devices: int
    num_nodes: int = 1
    timeout_s: float = 300.0


# what Lightning's launcher writes into this process's environment for its child processes
_LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


def _trainer_placement(ddp: Ddp | None) -> dict[str, Any]:
    """Trainer arguments: one process, or DDP over ``(devices, num_nodes)`` CPU processes
    (gloo). Lightning starts the other local processes by re-running the command line;
    under ``torchrun`` or SLURM it joins the processes those started."""
    if ddp is None:
        return {"devices": 1}
    from pytorch_lightning.strategies import DDPStrategy

    return {
        "devices": ddp.devices,
        "num_nodes": ddp.num_nodes,
        "strategy": DDPStrategy(
            process_group_backend="gloo", timeout=datetime.timedelta(seconds=ddp.timeout_s)
        ),
    }


@contextlib.contextmanager
def _ddp_session(trainer: pl.Trainer, ddp: Ddp) -> Iterator[None]:
    """Around a DDP ``trainer.fit``: a torch.distributed failure (a rank that never joined
    within ``timeout_s``, a port in use, a peer gone mid-collective) becomes one line naming
    this rank and the setting; the process group is destroyed on the way out, success or
    failure, if this fit created it (a group created before is the caller's), and the
    launcher's environment variables are put back, so that a later fit in this process
    starts afresh."""
    import torch.distributed as dist

    had_group = dist.is_available() and dist.is_initialized()
    env = {k: os.environ.get(k) for k in _LAUNCH_ENV}
    try:
        yield
    except dist.DistError as err:
        world = ddp.devices * ddp.num_nodes
        address = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DdpError(
            f"DDP rank {trainer.global_rank} of {world} (rendezvous {address}): {reason} "
            f"(distributed.timeout_s={ddp.timeout_s:g}; a rank that failed or was never "
            "started stops the others after that long: see its own output; num_nodes > 1 "
            "needs the command started on every node)"
        ) from None
    finally:
        if not had_group and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class DdpError(ConnectionError):
    """A DDP fit could not reach, or lost, its other ranks (an OSError: the CLI reports it in
    one line)."""


def fit(
    data: TrainingData, params: TcnParams, seed: int, ddp: Ddp | tuple[int, int] | None = None
) -> TcnModel:
    """``ddp``: (devices per node, nodes[, timeout_s]) for Lightning DDP; None: this
    process only."""
    ddp = Ddp(*ddp) if ddp is not None else None
    if data.sampled:
        raise ValueError(
            "tcn needs an unsampled feature table (data.negative_keep: 1.0): history windows "
            "over negatively sampled rows would leak their labels"
        )
    for name in ("lightning.pytorch", "pytorch_lightning", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    pl.seed_everything(seed, workers=True, verbose=False)
    torch.set_num_threads(params.num_threads)
    rng = np.random.default_rng(seed)
    idx = _targets(data, params, rng)
    neg_w = np.where(data.y[idx] > 0, 1.0, 1.0 / params.train_negative_keep) * data.w[idx]
    w = class_balanced(data.y[idx], neg_w, "balanced")
    va = data.rows("validation")
    va = np.sort(rng.choice(va, min(len(va), 50_000), replace=False))
    f = len(data.spec)
    net = TcnNet(f, params.channels, params.kernel_size, params.layers)
    net.set_statistics(data.x[idx[:: max(1, len(idx) // 50_000)]])
    module = TcnModule(net, params.learning_rate)
    gen = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(
        _tensors(data, idx, w, params.window), params.batch_size, shuffle=True, generator=gen
    )
    val_dl = DataLoader(_tensors(data, va, data.w[va], params.window), 8192)
    trainer = pl.Trainer(
        max_epochs=params.epochs,
        accelerator="cpu",
        **_trainer_placement(ddp),
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    session = _ddp_session(trainer, ddp) if ddp is not None else contextlib.nullcontext()
    with session, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train_dl, val_dl)
    model = TcnModel(net.eval(), params.window, f)
    model.history = dict(module.history)
    model.world_size = trainer.world_size
    return model
