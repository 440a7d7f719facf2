"""One training run: data -> fit -> calibrate -> export ONNX -> evaluate -> track and register.

Every probability reported is the *served* one: validation and test rows are scored through
the exported ONNX file by :class:`OnnxScorer`, calibration included. The recency baseline is
fitted on the same training window and reported beside the model. An export whose ONNX file
does not score like the fitted model (``export.parity_tolerance``) ends the run there
(:class:`~kvcast.training.export.ParityError`): the output folder keeps what an earlier run
left there, and the MLflow run, marked failed with the reason, registers nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvcast import __version__
from kvcast.output_paths import output_dir
from kvcast.predictor.model_meta import ModelMeta
from kvcast.predictor.recency_table import FEATURE
from kvcast.training import report
from kvcast.training.calibrate import fit_calibration
from kvcast.training.config import TrainConfig
from kvcast.training.data import TrainingData, load_frame
from kvcast.training.distributed import fit_model, secondary_rank
from kvcast.training.evaluate import metrics_of, predict_rows
from kvcast.training.export import ParityError, export_checked
from kvcast.training.models.recency import fit_table
from kvcast.training.publish import card, publish
from kvcast.training.registry import model_kind
from kvcast.training.tracking import STORE_ERRORS, Tracker, TrackingError, check_store

Stage = Callable[[str], None]
# what a run writes into its output folder (and logs to MLflow, with feature_spec.json)
ARTEFACTS = (
    "model.onnx",
    "metrics.json",
    "model_card.md",
    "pr_curve.png",
    "reliability.png",
    "feature_importance.png",
)


@dataclass(frozen=True)
class TrainResult:
    kind: str
    out_dir: Path
    model_path: Path
    metrics: dict[str, Any]
    run_id: str | None = None
    registered: str | None = None  # "name/version"
    champion: str | None = None  # promoted | kept


def load_data(cfg: TrainConfig) -> TrainingData:
    df, spec, info = load_frame(cfg.data)
    return TrainingData.build(df, spec, cfg.split, cfg.data.label, info)


def run_training(
    cfg: TrainConfig, stage: Stage | None = None, data: TrainingData | None = None
) -> TrainResult:
    say = stage or (lambda _: None)
    t0 = time.perf_counter()
    out = cfg.output_dir
    output_dir(out, "out_dir")  # before the data, not after a long replay
    files_fit_in(out)  # before anything is fitted or registered
    if cfg.tracking.enabled and data is None:  # (a caller that read the data checked it)
        check_store(cfg.tracking)  # before the data: a replay takes minutes
    say("data")
    data = data if data is not None else load_data(cfg)
    model_kind(cfg.kind)  # an unknown kind fails before any work
    require_both_classes(data, cfg.data.label)
    tracker = (
        Tracker(cfg.tracking, cfg.registered_model, f"{cfg.kind}-{int(time.time())}")
        if cfg.tracking.enabled and not (cfg.distributed.strategy == "ddp" and secondary_rank())
        else None
    )
    with contextlib.ExitStack() as stack:
        if tracker is not None:
            stack.enter_context(tracker)
        say(f"fit {cfg.kind}")
        t_fit = time.perf_counter()
        fitted = fit_model(cfg, data)  # (a secondary DDP rank ends in there)
        fit_s = time.perf_counter() - t_fit
        # this run's files are written into a staging folder and moved into ``out`` together
        # at the end: a run stopped or failed on the way leaves an earlier model with its own
        # metrics and card as they were, never a new model.onnx beside none
        stage = new_stage(out)
        stack.callback(shutil.rmtree, stage, ignore_errors=True)
        windows = data.window_index(fitted.window) if fitted.window else None
        va, te = data.rows("validation"), data.rows("test")
        say("calibrate and export")
        raw_val = predict_rows(fitted.predict_raw, data.x, va, fitted.window, windows)
        calib = fit_calibration(
            raw_val, data.y[va], data.w[va], cfg.calibration_method, cfg.calibration.max_points,
            link=fitted.output,
        )  # fmt: skip
        tr = data.rows("train")
        meta = ModelMeta(
            kind=cfg.kind,
            spec=data.spec,
            window=fitted.window,
            calibration=calib,
            missing=fitted.missing,
            fallback=float(np.sum(data.w[tr] * data.y[tr]) / np.sum(data.w[tr])),
            baseline=fit_table(data),
            version=__version__,
            extra=_provenance(cfg, data),
        )
        try:
            exported = export_checked(
                fitted, meta, stage / "model.onnx", data.x, te, windows, cfg.parity_tolerance
            )
        except ParityError as err:
            if tracker is not None:  # the failed run says why (a store error must not hide it)
                with contextlib.suppress(*STORE_ERRORS):
                    tracker.metrics({"onnx_parity_max_abs": err.gap})
                    tracker.tags({"export.refused": str(err)})
            raise
        proto, scorer, gap = exported.proto, exported.scorer, exported.gap
        say("evaluate")
        ev = cfg.evaluation
        col = data.spec.index(FEATURE)
        metrics: dict[str, Any] = {}
        for part, idx in (("validation", va), ("test", te)):
            p = predict_rows(scorer.score, data.x, idx, fitted.window, windows)
            metrics[part] = metrics_of(p, data.frame, idx, data.y, data.w, ev.budget_k, ev.ece_bins)
            base = meta.baseline.predict(data.x[idx, col]) if meta.baseline else p
            metrics[f"{part}_recency"] = metrics_of(
                base, data.frame, idx, data.y, data.w, ev.budget_k, ev.ece_bins
            )
            if part == "test":
                report.plot_pr(
                    data.y[idx], data.w[idx], {cfg.kind: p, "recency": base}, stage / "pr_curve.png"
                )
                report.plot_reliability(
                    data.y[idx],
                    data.w[idx],
                    p,
                    ev.ece_bins,
                    stage / "reliability.png",
                    ev.reliability_bins,
                )
        report.plot_importance(fitted.importance(data), stage / "feature_importance.png")
        summary: dict[str, Any] = {
            "kind": cfg.kind,
            **metrics,
            "onnx_parity_max_abs": gap,
            "onnx_parity_tolerance": cfg.parity_tolerance,
            "fit_seconds": fit_s,
            "windows": data.split.bounds,
            "data": data.describe() | {k: v for k, v in data.info.items() if k != "feature_config"},
        }
        registered = champion = None
        failed: TrackingError | None = None
        if tracker is not None:
            say("track")
            files_fit_in(out)  # again, as the model is registered: the fit took a while
            try:
                registered, champion = publish(tracker, cfg, data, fitted, proto, summary)
            except STORE_ERRORS as err:  # keep what was trained; say what the store missed
                failed = tracker.failure(err, out)
        summary["train_seconds"] = time.perf_counter() - t0
        (stage / "metrics.json").write_text(json.dumps(_clean(summary), indent=2) + "\n")
        (stage / "model_card.md").write_text(card(cfg, data, summary, registered, meta))
        publish_stage(stage, out)
        if failed is not None:
            raise failed
        if tracker is not None:
            try:
                tracker.artifacts(out / name for name in ARTEFACTS)
            except STORE_ERRORS as err:
                raise tracker.failure(err, out) from err
    run_id = tracker.run_id if tracker else None
    return TrainResult(cfg.kind, out, out / "model.onnx", summary, run_id, registered, champion)


STAGE = ".partial-"  # under out_dir, one per run: its files until they are all written


STALE_STAGE_S = 86_400.0  # a staging folder this old is a killed run's (no fit takes a day)


def files_fit_in(out: Path) -> None:
    """An IsADirectoryError when a directory sits where the run writes one of its files in
    ``out``: its files could not be published, so nothing may be registered either."""
    taken = [out / name for name in ARTEFACTS if (out / name).is_dir()]
    if taken:
        raise IsADirectoryError(f"out_dir: {taken[0]} is a directory where the run writes a "
                                "file; move it away")  # fmt: skip


def new_stage(out: Path) -> Path:
    """A staging folder of this run's own in ``out`` (two runs into one folder never share
    one); those a killed run left over a day ago are removed first."""
    for old in out.glob(f"{STAGE}*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and time.time() - old.stat().st_mtime > STALE_STAGE_S:
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=STAGE, dir=out))


def publish_stage(stage: Path, out: Path) -> None:
    """Move every file of ``stage`` into ``out``, one rename each (microseconds in all); a
    name taken there by a directory is an error before anything is moved
    (:func:`files_fit_in`)."""
    files_fit_in(out)
    for f in sorted(stage.iterdir()):
        os.replace(f, out / f.name)


def require_both_classes(data: TrainingData, label: str) -> None:
    """Refuse a table on which no meaningful model can be fitted or judged: a window without
    positives (a constant model, calibration without a target, NaN validation and test
    metrics that the champion rule cannot compare), or a training window without negatives."""
    for part in ("train", "validation", "test"):
        idx = data.rows(part)
        positives = int(np.count_nonzero(data.y[idx]))
        lo, hi = data.split.bounds[part]
        if positives == 0 or (part == "train" and positives == len(idx)):
            which = "positive" if positives == 0 else "negative"
            raise ValueError(
                f"the {part} window [{lo:.0f}, {hi:.0f}) ms has no {which} rows of {label} "
                f"({positives} positives in {len(idx)} rows): use a longer trace or another label"
            )


def _provenance(cfg: TrainConfig, data: TrainingData) -> dict[str, str]:
    b = data.split.bounds
    return {
        "trace_hash": data.info.get("trace_hash", ""),
        "config_hash": data.info.get("config_hash", ""),
        "feature_config": data.info.get("feature_config", ""),
        "label": cfg.data.label,
        "train_window": json.dumps({k: list(v) for k, v in b.items()}),
    }


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj
