"""The champion rule: a new model takes the alias only if it beats the champion, like for like.

The current champion is loaded from the registry and re-scored on this run's validation window,
so both numbers come from the same rows. A tie keeps the champion. A champion that cannot be
scored on these rows (another feature spec, or a sequence model and a sampled table) or was
trained for another target (another label column or label horizon) is kept, and the reason is
recorded: moving the alias then is a deliberate, manual act.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcast.features.spec import SpecMismatch
from kvcast.predictor.model_meta import ModelFormatError
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.data import TrainingData, label_horizon
from kvcast.training.evaluate import metrics_of, predict_rows


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    previous_version: str | None = None
    previous_score: float | None = None

    def tags(self, metric: str) -> dict[str, str]:
        out = {
            "champion.decision": "promoted" if self.promote else "kept",
            "champion.reason": self.reason,
        }
        if self.previous_version is not None:
            out["champion.previous_version"] = self.previous_version
        if self.previous_score is not None:
            out[f"champion.previous_val_{metric}"] = f"{self.previous_score:.6g}"
        return out


def validation_score(scorer: OnnxScorer, data: TrainingData, metric: str, budget_k: int) -> float:
    va = data.rows("validation")
    windows = data.window_index(scorer.window) if scorer.window else None
    p = predict_rows(scorer.score, data.x, va, scorer.window, windows)
    return float(metrics_of(p, data.frame, va, data.y, data.w, budget_k, 15)[metric])


def decide(
    new_score: float,
    champion_uri: str | None,
    champion_version: str | None,
    data: TrainingData,
    metric: str,
    budget_k: int,
    label: str = "label_burst",
    tracking_uri: str | None = None,
) -> Decision:
    if champion_uri is None or champion_version is None:
        return Decision(True, "no champion yet")
    try:
        champ = OnnxScorer.load(champion_uri, expected=data.spec, tracking_uri=tracking_uri)
    except (SpecMismatch, ModelFormatError) as err:
        return Decision(False, f"champion not comparable: {err}", champion_version)
    other = _other_target(champ, data, label)
    if other:  # its P is of another event: the serving side would refuse the swap anyway
        return Decision(False, f"champion not comparable: {other}", champion_version)
    if champ.window and data.sampled:
        return Decision(
            False, "champion is a sequence model; this table is sampled", champion_version
        )
    old = validation_score(champ, data, metric, budget_k)
    if new_score > old:
        reason = f"val {metric} {new_score:.6g} > champion {old:.6g}"
        return Decision(True, reason, champion_version, old)
    reason = f"val {metric} {new_score:.6g} <= champion {old:.6g}"
    return Decision(False, reason, champion_version, old)


def _other_target(champ: OnnxScorer, data: TrainingData, label: str) -> str:
    """How the champion's target differs from this run's ("" when they are the same): the
    label column, or the label horizon (when both record one)."""
    meta = champ.meta
    theirs = meta.extra.get("label")
    if theirs and theirs != label:
        return f"trained on {theirs!r}, this run on {label!r}"
    mine, horizon = label_horizon(data.info), meta.label_horizon_ms
    if mine is not None and horizon is not None and not math.isclose(mine, horizon):
        return f"label horizon {horizon:g} ms, this run's {mine:g} ms"
    return ""
