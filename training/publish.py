"""What a training run publishes: the MLflow record, the registry version, the model card."""

from __future__ import annotations

import math
from typing import Any

from kvcast.predictor.model_meta import ModelMeta
from kvcast.training import report
from kvcast.training.champion import WINDOW, decide, worth_serving
from kvcast.training.config import TrainConfig
from kvcast.training.data import TrainingData
from kvcast.training.tracking import Tracker


def publish(
    tracker: Tracker,
    cfg: TrainConfig,
    data: TrainingData,
    fitted: Any,
    proto: Any,
    summary: dict[str, Any],
) -> tuple[str, str]:
    """Log the run (parameters, spec, hashes, per-step and final metrics), register the ONNX
    model and apply the champion rule; returns ("name/version", "promoted" | "kept")."""
    config = cfg.model_dump(mode="json")
    config["export"]["parity_tolerance"] = cfg.parity_tolerance  # as applied (unset: the kind's)
    config["calibration"]["method"] = cfg.calibration_method  # likewise
    config["split"]["purge_ms"] = data.split.purge_ms  # as applied (raised to the label horizon)
    tracker.params(config)
    tracker.params({"fitted": fitted.summary()})
    tracker.tags(
        {
            "kind": cfg.kind,
            "trace_hash": data.info.get("trace_hash", ""),
            "config_hash": data.info.get("config_hash", ""),
            "feature_spec_digest": data.spec.digest,
        }
    )
    tracker.text(data.spec.to_json(), "feature_spec.json")
    tracker.history(fitted.history)
    for part in ("validation", "test", "test_recency"):
        tracker.metrics(summary[part], prefix=f"{part}_")
    tracker.metrics(
        {
            "onnx_parity_max_abs": summary["onnx_parity_max_abs"],
            "onnx_parity_tolerance": summary["onnx_parity_tolerance"],
            "fit_seconds": summary["fit_seconds"],
        }
    )
    metric = cfg.tracking.champion_metric
    new = float(summary[WINDOW][metric])  # the window neither model tuned on (champion.py)
    prev = tracker.champion_version()  # the alias is read once: that version is compared
    # (the recency kind is that baseline: it is judged on its positives alone)
    judged = cfg.tracking.must_beat_recency and cfg.kind != "recency"
    baseline = float(summary[f"{WINDOW}_recency"][metric]) if judged else -math.inf
    unfit = worth_serving(new, baseline, data, metric, cfg.tracking.min_test_positives)
    decision = decide(
        new, tracker.version_uri(prev) if prev else None, prev, data, metric,
        cfg.evaluation.budget_k, cfg.data.label, tracker.uri, unfit,
    )  # fmt: skip
    version = tracker.register(proto)
    if decision.promote:
        tracker.promote(version)
    tags = decision.tags(metric) | {f"{WINDOW}_{metric}": f"{new:.6g}"}
    tracker.tags(tags)
    tracker.params({"champion_decision": tags["champion.decision"]})
    tracker.version_tags(version, tags | {"run_id": tracker.run_id})
    summary["registered_model"] = f"{tracker.name}/{version}"
    summary["champion"] = tags
    return f"{tracker.name}/{version}", tags["champion.decision"]


def card(
    cfg: TrainConfig, data: TrainingData, s: dict[str, Any], reg: str | None, meta: ModelMeta
) -> str:
    champion = s.get("champion", {}).get("champion.reason", "")
    notes = {
        "registered": f"{reg} ({champion})" if reg else "(tracking disabled)",
        "label": cfg.data.label,
        "calibration": meta.calibration.method,
        "missing values": meta.missing,
        "ONNX parity (max abs raw)": (
            f"{s['onnx_parity_max_abs']:.3g} (tolerance {s['onnx_parity_tolerance']:.3g})"
        ),
    }
    metrics = {
        f"{cfg.kind} (test)": s["test"],
        f"{'recency baseline' if cfg.kind == 'recency' else 'recency'} (test)": s["test_recency"],
        f"{cfg.kind} (validation)": s["validation"],
    }
    prov = {k: v for k, v in data.info.items() if k != "feature_config"}
    return report.model_card(
        kind=cfg.kind,
        version=meta.version,
        spec=data.spec,
        metrics=metrics,
        windows=data.split.bounds,
        provenance=prov,
        notes=notes,
    )
