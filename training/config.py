"""The training configuration (``configs/train/*.yaml``), frozen and validated.

Relative paths are resolved against the working directory, as on the command line.
``{kind}`` in ``out_dir`` and ``tracking.registered_model`` is replaced by the model kind.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kvcast.config import FrozenConfig, load_config
from kvcast.features.dask_client import check_scheduler
from kvcast.training.models.params import LgbmParams, RecencyParams, RuleParams, TcnParams

ModelParams = Annotated[
    RecencyParams | RuleParams | LgbmParams | TcnParams, Field(discriminator="kind")
]


class DataConfig(FrozenConfig):
    """Where the training table comes from: a trace replay, or an existing features.parquet
    (``features``: the keys of :data:`REPLAY_KEYS` must then keep their defaults)."""

    trace: str = "bundled:conversation"  # trace path or bundled:NAME
    format: Literal["auto", "mooncake", "azure", "parquet"] = "auto"
    skip_bad: bool = False
    simulator_config: Path | None = None  # None: embedded simulator defaults
    features_config: Path | None = None  # None: embedded feature/label defaults
    policy: str = "dynamo_kv"  # router of the replay that produces the events
    time_scale: float = Field(1.0, gt=0)
    negative_keep: float | None = Field(None, gt=0, le=1)  # override the sampling rate
    features: Path | None = None  # an existing features.parquet (or its folder): no replay
    label: str = "label_burst"  # or label_burst_k2 ...

    @model_validator(mode="after")
    def _no_replay_setting_beside_a_table(self) -> DataConfig:
        """``features`` skips the replay: a replay setting beside it would be ignored, so one
        that differs from its default is refused, not dropped."""
        if self.features is None:
            return self
        given = [
            f"data.{key}={_shown(getattr(self, key))}"
            for key in REPLAY_KEYS
            if getattr(self, key) != DataConfig.model_fields[key].default
        ]
        if given:
            one = len(given) == 1
            raise ValueError(
                f"{', '.join(given)} set{'s' if one else ''} the trace replay, which "
                f"data.features={_shown(self.features)} skips (the table is read as it is): "
                f"leave {'it' if one else 'them'} out, or set features: null to replay"
            )
        return self


# the data keys that only a replay reads (a features table was made with its own)
REPLAY_KEYS = (
    "trace",
    "format",
    "skip_bad",
    "simulator_config",
    "features_config",
    "policy",
    "time_scale",
    "negative_keep",
)


def _shown(value: object) -> str:
    return repr(str(value)) if isinstance(value, Path) else repr(value)


class SplitConfig(FrozenConfig):
    """Train, validation, test: consecutive windows of the tick range, never random."""

    train: float = Field(0.6, gt=0, lt=1)
    validation: float = Field(0.2, gt=0, lt=1)  # early stopping and calibration
    test: float = Field(0.2, gt=0, lt=1)  # reported metrics, the champion comparison
    purge_ms: float = Field(30000.0, ge=0)  # drop rows whose label window crosses a boundary

    @model_validator(mode="after")
    def _sum_to_one(self) -> SplitConfig:
        total = self.train + self.validation + self.test
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"train + validation + test must be 1, got {total:g}")
        return self


# The default calibration.method of each kind (fitted on the validation window). LightGBM's
# is Platt: its isotonic table on the bundled conversation sample had three levels (664
# positives), so every block of a long chain kept its root's P and the decider copied whole
# chains, 70-150 GB a run of which 0-8 GB was read; the Platt fit keeps the ranking (same
# PR-AUC) and about the same ECE, grades deep blocks below their roots, and cut those bytes
# 3-5x (seeds 0-3) with P50 TTFT equal or better, and kept the copies that pay on agent
# traffic (two unseen seeds, x1-x12: P50 within 4%, P99 equal or lower).
# benchmarks/RESULTS.md has the runs.
CALIBRATION: dict[str, str] = {"recency": "isotonic", "rule": "isotonic", "lgbm": "platt",
                               "tcn": "isotonic"}  # fmt: skip


class CalibrationConfig(FrozenConfig):
    # fitted on validation; None: the kind's default (CALIBRATION)
    method: Literal["isotonic", "platt", "none"] | None = None
    max_points: int = Field(64, ge=2, le=4096)  # knots of the stored piecewise-linear table


# The default export.parity_tolerance of each kind: the largest max abs gap between the fitted
# model's raw scores and its ONNX file's (onnxruntime) on the test window that an export
# accepts (the run's onnx_parity_max_abs). Measured with `kvcast train --kind KIND` and at
# seeds 0-2 on both bundled traces (conversation, synthetic), default sizes plus a 64-channel
# 3-layer TCN and a 300-round LightGBM: recency and rule 0 (native and ONNX do the same
# float32 operations in the same order), lgbm 4.5e-7 to 6.7e-7 (ONNX sums the trees in float32,
# LightGBM in float64), tcn 3.2e-5 to 6.7e-5 (torch and onnxruntime sum the float32
# convolutions in different orders). Each default is well clear of that: 1e-6 allows 16
# float32 steps of a recency rate (<= 1), 1e-5 one step of a rule logit below 128; for lgbm and
# tcn it is 15 times the largest gap measured. A converter bug (a wrong weight, threshold or
# preprocessing step) moves raw scores by far more than any of these.
PARITY_TOLERANCE: dict[str, float] = {"recency": 1e-6, "rule": 1e-5, "lgbm": 1e-5, "tcn": 1e-3}
MAX_PARITY_TOLERANCE = 1e-2  # above it the check could not tell a broken export from float32


class ExportConfig(FrozenConfig):
    """The ONNX export's parity check: the fitted model and the exported file (loaded back
    through onnxruntime) score the test window; when their raw scores differ by more than
    ``parity_tolerance`` anywhere (or the gap is NaN), the export fails and no model is
    written, tracked or registered. ``None``: the kind's default (``PARITY_TOLERANCE``, as
    :attr:`TrainConfig.parity_tolerance` resolves it)."""

    parity_tolerance: (
        Annotated[float, Field(ge=0, le=MAX_PARITY_TOLERANCE, allow_inf_nan=False)] | None
    ) = None


class EvaluationConfig(FrozenConfig):
    budget_k: int = Field(64, ge=1)  # blocks replicated per tick for precision/recall@budget
    ece_bins: int = Field(15, ge=2)  # bins of ece (equal width), ece_quantile and the diagram
    # the reliability diagram's bins (kvcast.training.reliability): quantile (equal mass, the
    # points where the rows are) or uniform (equal width, as the recorded ece)
    reliability_bins: Literal["quantile", "uniform"] = "quantile"


class TrackingConfig(FrozenConfig):
    enabled: bool = True
    tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db
    experiment: str = "kvcast-train"
    registered_model: str = "kvcast-{kind}"  # one registered model per kind
    champion_alias: str = Field("champion", pattern=r"^[A-Za-z0-9_-]+$")
    champion_metric: Literal["pr_auc", "roc_auc"] = "pr_auc"  # test window, higher wins
    # a model is promoted only when its test window holds at least this many positive rows
    # (fewer cannot tell two models apart) and, with must_beat_recency, it beats its recency
    # baseline there
    min_test_positives: int = Field(30, ge=0)
    must_beat_recency: bool = True

    @field_validator("champion_alias")
    @classmethod
    def _not_reserved(cls, alias: str) -> str:
        if alias.lower() == "latest" or re.fullmatch(r"[vV]\d+", alias):
            raise ValueError(f"{alias!r} is reserved by MLflow (latest, v<digits>)")
        return alias


DEFAULT_TIMEOUT_S = 300.0  # DDP rendezvous and collectives, Dask workers (torch: 1,800 s)


class DistributedConfig(FrozenConfig):
    """Where the fit runs. ``engine: dask`` trains LightGBM with ``lightgbm.dask`` on the
    cluster at ``scheduler`` (``tcp://host:8786``, or ``local``: a new cluster of ``workers``
    processes); ``strategy: ddp`` trains the TCN with Lightning DDP over ``devices`` processes
    per node on ``num_nodes`` nodes (CPU, gloo; multi-node runs are started by ``torchrun``
    or SLURM on every node).

    ``timeout_s`` bounds every wait on the other participants: a DDP rank's wait for the
    process group to form (each rank loads the training table first: leave room for the
    slowest) and for each collective; the Dask client's wait for a worker to appear. A rank
    that fails, or is never started, then stops the others after ``timeout_s`` with a one-line
    error instead of torch's 30-minute default."""

    engine: Literal["local", "dask"] = "local"
    scheduler: str = "local"
    workers: int = Field(2, ge=1)  # local scheduler only
    strategy: Literal["auto", "ddp"] = "auto"
    devices: int = Field(1, ge=1)
    num_nodes: int = Field(1, ge=1)
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=86400)  # ddp or dask only

    @model_validator(mode="after")
    def _no_setting_ignored(self) -> DistributedConfig:
        """A setting its engine or strategy would ignore is refused, not dropped."""
        if self.strategy != "ddp" and (self.devices, self.num_nodes) != (1, 1):
            raise ValueError(
                f"distributed.devices={self.devices} and num_nodes={self.num_nodes} take "
                "effect with strategy: ddp only (the TCN's DDP fit); set it, or leave them at 1"
            )
        if self.engine == "local" and (self.scheduler, self.workers) != ("local", 2):
            raise ValueError(
                f"distributed.scheduler={self.scheduler!r} and workers={self.workers} take "
                "effect with engine: dask only; set it, or leave them out"
            )
        waits = self.engine == "dask" or self.strategy == "ddp"
        if not waits and self.timeout_s != DEFAULT_TIMEOUT_S:
            raise ValueError(
                f"distributed.timeout_s={self.timeout_s:g} takes effect with strategy: ddp or "
                "engine: dask only (a fit in this process waits on no one); leave it out"
            )
        check_scheduler(self.scheduler, "distributed.scheduler")  # before the replay
        if self.engine == "dask" and self.scheduler != "local" and self.workers != 2:
            raise ValueError(
                f"distributed.workers={self.workers} sizes a new local cluster; the cluster at "
                f"{self.scheduler} has its own workers: leave workers out"
            )
        return self


class TrainConfig(FrozenConfig):
    data: DataConfig = DataConfig()
    split: SplitConfig = SplitConfig()
    model: ModelParams = LgbmParams()
    calibration: CalibrationConfig = CalibrationConfig()
    export: ExportConfig = ExportConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    tracking: TrackingConfig = TrackingConfig()
    out_dir: str = "kvcast-out/train/{kind}"  # model.onnx, metrics.json, plots, model card
    seed: int = 0
    distributed: DistributedConfig = DistributedConfig()

    @model_validator(mode="after")
    def _distributed_fits_kind(self) -> TrainConfig:
        d = self.distributed
        if d.engine == "dask" and self.kind != "lgbm":
            raise ValueError(f"distributed.engine: dask trains lgbm only, not {self.kind}")
        if d.strategy == "ddp" and self.kind != "tcn":
            raise ValueError(f"distributed.strategy: ddp trains tcn only, not {self.kind}")
        return self

    @model_validator(mode="after")
    def _tcn_keeps_every_row(self) -> TrainConfig:
        """A sequence model's history windows need every candidate row: for the tcn kind an
        unset ``data.negative_keep`` is 1.0, not the feature config's sampling rate (which
        the TCN refuses, after the replay), and a lower one is refused here. (An "after"
        rule: a "before" one would make pydantic validate the parsed JSON in Python mode,
        where strict refuses a list for a tuple.)"""
        keep = self.data.negative_keep
        if self.kind != "tcn" or self.data.features is not None:
            return self
        if keep is None:
            return self.model_copy(
                update={"data": self.data.model_copy(update={"negative_keep": 1.0})}
            )
        if keep < 1:
            raise ValueError(
                f"data.negative_keep={keep:g}: the tcn's history windows need every candidate "
                "row (1.0); sampling negatives would leak their labels"
            )
        return self

    @property
    def kind(self) -> str:
        return self.model.kind

    @property
    def output_dir(self) -> Path:
        return Path(self.out_dir.replace("{kind}", self.kind))

    @property
    def parity_tolerance(self) -> float:
        """The largest native-vs-ONNX raw-score gap this run's export accepts."""
        tolerance = self.export.parity_tolerance
        return PARITY_TOLERANCE[self.kind] if tolerance is None else tolerance

    @property
    def calibration_method(self) -> str:
        """The calibration this run fits: the configured one, else the kind's default."""
        method = self.calibration.method
        return CALIBRATION[self.kind] if method is None else method

    @property
    def registered_model(self) -> str:
        return self.tracking.registered_model.replace("{kind}", self.kind)


def load_train_config(path: str | Path) -> TrainConfig:
    return load_config(TrainConfig, path)
