"""The champion rule: a new model takes the alias only if it beats the champion, like for like.

Both models are scored on this run's **test window**, the rows neither of them tuned on. The
validation window will not do: the new model early-stopped and was calibrated there, so its
score there is optimistic and the comparison favoured it. The test window is held out from
everything the new model fits (the training window fits it, validation stops and calibrates
it; the export's parity check only compares the fitted model with its own ONNX file, labels
unread), and from the champion's fit when the champion was trained on another trace. One
trained on this trace records its windows: when its training or validation window (the ticks
it fitted, stopped and calibrated on, up to its test window) reaches into this run's test
window, its score there is optimistic too, and the champion is kept, the reason recorded.

Why not a selection window of its own, carved from the end of validation? It needs one more
purge gap of the label horizon (30 s by default) beside the validation window's: on the bundled
sample's first 600 requests (the quickstart's test trace) the validation window holds 708 rows
after its purge, and no split of it leaves two non-empty purged windows; on the whole sample
it would take the rows calibration learns from down from ~10,000 to ~4,400. The cost of the
test window: a promoted model was chosen on its test score, so that score is, across many
runs, a little optimistic (winner's curse); for an unbiased figure score the champion on later
traffic (``kvcast score``). The run records the window compared on (``champion.window``,
``champion.window_ms``) and both scores.

Before any champion is read, a model is promoted only when it could be judged and is worth
serving: its test window holds at least ``tracking.min_test_positives`` positive rows (on a
few dozen rows any model may win by chance), and it beats its own recency baseline there (a
model no better than how long a block has been idle adds nothing over ``predictive_recency``;
a constant model scores exactly the base rate). Otherwise it is registered and kept out of the
alias, the reason recorded, whether or not there is a champion yet.

A tie keeps the champion. A champion that cannot be scored on these rows (another feature spec,
or a sequence model and a sampled table), was trained for another target (another label column
or label horizon) or has tuned on this test window is kept, and the reason is recorded: moving
the alias then is a deliberate, manual act.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from kvcast.features.spec import SpecMismatch
from kvcast.predictor.model_meta import ModelFormatError
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.data import TrainingData, label_horizon
from kvcast.training.evaluate import metrics_of, predict_rows

WINDOW = "test"  # the split part both models are compared on


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    previous_version: str | None = None
    previous_score: float | None = None
    window_ms: tuple[float, float] | None = None  # the compared window, [start, end) tick ms

    def tags(self, metric: str) -> dict[str, str]:
        out = {
            "champion.decision": "promoted" if self.promote else "kept",
            "champion.reason": self.reason,
            "champion.window": WINDOW,
        }
        if self.window_ms is not None:
            out["champion.window_ms"] = f"[{self.window_ms[0]:.0f}, {self.window_ms[1]:.0f})"
        if self.previous_version is not None:
            out["champion.previous_version"] = self.previous_version
        if self.previous_score is not None:
            out[f"champion.previous_{WINDOW}_{metric}"] = f"{self.previous_score:.6g}"
        return out


def held_out_score(scorer: OnnxScorer, data: TrainingData, metric: str, budget_k: int) -> float:
    """``scorer``'s ``metric`` on the rows of the compared window."""
    idx = data.rows(WINDOW)
    windows = data.window_index(scorer.window) if scorer.window else None
    p = predict_rows(scorer.score, data.x, idx, scorer.window, windows)
    return float(metrics_of(p, data.frame, idx, data.y, data.w, budget_k, 15)[metric])


def worth_serving(
    new_score: float, baseline_score: float, data: TrainingData, metric: str, min_positives: int
) -> str:
    """Why the new model may not take the alias whatever the champion ("" when it may): too
    few positives in the compared window to judge it, or no better there than its recency
    baseline (``baseline_score``)."""
    positives = int((data.y[data.rows(WINDOW)] > 0).sum())
    if positives < min_positives:
        return (f"{WINDOW} window has {positives} positive rows, under "
                f"tracking.min_test_positives={min_positives}: too few to judge")  # fmt: skip
    if not new_score > baseline_score:  # NaN too
        return (f"{WINDOW} {metric} {new_score:.6g} is not above its recency baseline's "
                f"{baseline_score:.6g}")  # fmt: skip
    return ""


def decide(
    new_score: float,
    champion_uri: str | None,
    champion_version: str | None,
    data: TrainingData,
    metric: str,
    budget_k: int,
    label: str = "label_burst",
    tracking_uri: str | None = None,
    unfit: str = "",
) -> Decision:
    """Promote or keep, given the new model's ``metric`` on the compared window (``unfit``:
    why it may not be promoted at all, :func:`worth_serving`)."""
    window = data.split.bounds[WINDOW]
    if unfit:
        return Decision(False, f"not promoted: {unfit}", champion_version, window_ms=window)
    if champion_uri is None or champion_version is None:
        return Decision(True, "no champion yet", window_ms=window)
    try:
        champ = OnnxScorer.load(champion_uri, expected=data.spec, tracking_uri=tracking_uri)
    except (SpecMismatch, ModelFormatError) as err:
        return Decision(False, f"champion not comparable: {err}", champion_version)
    why = _other_target(champ, data, label) or _tuned_on(champ, data)
    if why:  # another event (the serving side would refuse the swap), or an optimistic score
        return Decision(False, f"champion not comparable: {why}", champion_version)
    if champ.window and data.sampled:
        return Decision(
            False, "champion is a sequence model; this table is sampled", champion_version
        )
    old = held_out_score(champ, data, metric, budget_k)
    verdict = ">" if new_score > old else "<="
    reason = f"{WINDOW} {metric} {new_score:.6g} {verdict} champion {old:.6g}"
    return Decision(new_score > old, reason, champion_version, old, window)


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


def _tuned_on(champ: OnnxScorer, data: TrainingData) -> str:
    """Where the champion fitted or tuned on ticks of this run's compared window ("" when it
    did not, or cannot be told: another trace, or no recorded windows). Ticks are compared as
    recorded: a replay of the same trace at another time scale is judged by its own ticks."""
    extra = champ.meta.extra
    trace = data.info.get("trace_hash", "")
    if not trace or extra.get("trace_hash", "") != trace:
        return ""
    try:
        bounds = json.loads(extra.get("train_window", ""))
        spans = [(float(lo), float(hi)) for part, (lo, hi) in bounds.items() if part != "test"]
    except (TypeError, ValueError):  # none recorded, or not as kvcast writes it
        return ""
    start, end = data.split.bounds[WINDOW]
    if not spans or max(hi for _, hi in spans) <= start:
        return ""
    lo, hi = min(lo for lo, _ in spans), max(hi for _, hi in spans)
    return (
        f"it was fitted or tuned on ticks {lo:.0f}-{hi:.0f} ms of this trace, which reach into "
        f"the {WINDOW} window [{start:.0f}, {end:.0f}) ms compared on"
    )
