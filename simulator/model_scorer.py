"""``predictive_rule``, ``predictive_lgbm``, ``predictive_tcn``: the decider fed by an ONNX model.

Each is the base router (``loop.router``) plus a
:class:`~kvcast.simulator.predictive.PredictiveReplicator` scoring its candidate chains with
:class:`ModelScorer`: the same :class:`FeatureState` the sidecar keeps, fed with the
simulator's own event stream (arrivals, vLLM-style block events, telemetry, finished
replications), and the same :class:`~kvcast.predictor.scorer.OnnxScorer` (onnxruntime,
calibration included) that the sidecar serves. What the scorer sees at a tick is exactly what
a live sidecar would have seen by then.

The model comes from an ONNX path or an MLflow URI (:func:`make_model_policy`'s ``model``);
without one, ``models:/kvcast-<kind>@champion`` in the local MLflow store. The model's own
feature config is used, with the cluster facts (nodes, block size, LLM, prefill) taken from
the simulator, and its feature spec must equal the one the state produces, or the policy is
refused with the features that differ.

Sequence models (``predictive_tcn``) score a window of ``L`` rows per block. Training builds
it from the block's rows at the feature ticks (every ``ticks.period_ms``, the candidates of
each tick), oldest first, edge-padded (:mod:`kvcast.predictor.windows`). Online the same
history is kept: just before the first event past a feature tick, the rows of that tick's
candidates are appended to each block's history (the last ``L - 1`` are kept); a decision
tick's window is that history plus the block's row at the decision time, edge-padded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event
from kvcast.features.online.state import FeatureState
from kvcast.features.spec import build_spec
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.predictor.scorer import OnnxScorer, resolve_model
from kvcast.simulator.policies.registry import register_policy
from kvcast.simulator.predictive import PredictiveReplicator
from kvcast.simulator.recording import feature_config_for
from kvcast.simulator.replicating_policy import DeciderReplicator, ReplicatingPolicy

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator

MODEL_KINDS = ("rule", "lgbm", "tcn")


def default_model(kind: str) -> str:
    """The registered champion of ``kind`` in the MLflow store (``train.py``'s default)."""
    return f"models:/kvcast-{kind}@champion"


@lru_cache(maxsize=16)
def load_scorer(model: str) -> OnnxScorer:
    """One loaded model per reference and process: capacity searches build many policies."""
    return OnnxScorer.load(resolve_model(model))


def model_feature_config(scorer: OnnxScorer) -> FeatureConfig:
    return scorer.meta.feature_config or FeatureConfig()


class ModelScorer:
    """Probabilities from an ONNX model over the rows of a :class:`FeatureState`."""

    def __init__(self, scorer: OnnxScorer) -> None:
        self.scorer = scorer
        self.state: FeatureState | None = None
        self.history: dict[int, deque[np.ndarray]] = {}
        self._sim: Simulator | None = None

    def observer_for(self, sim: Simulator) -> Callable[[Event], None]:
        """A fresh feature state for the run ``sim``; returns what feeds it."""
        fcfg = feature_config_for(sim.cfg, sim.trace, model_feature_config(self.scorer))
        build_spec(fcfg).require_equal(self.scorer.spec)
        self.state = state = FeatureState(fcfg)
        self.history = {}
        self._sim = sim
        if self.scorer.window == 0:
            return state.update
        period, keep = fcfg.ticks.period_ms, self.scorer.window - 1
        next_tick = fcfg.ticks.start_ms

        def observe(ev: Event) -> None:
            nonlocal next_tick
            if next_tick is None:
                next_tick = ev.ts_ms
            while ev.ts_ms > next_tick:
                self._snapshot(next_tick, keep)
                next_tick += period
            state.update(ev)

        return observe

    def _snapshot(self, tick_ms: float, keep: int) -> None:
        """Append every candidate's row at ``tick_ms`` to its history (the training rule)."""
        assert self.state is not None
        blocks = self.state.candidates(tick_ms)
        if keep < 1 or not blocks:
            return
        rows = self.state.rows(tick_ms, blocks)
        history = self.history
        for b, row in zip(blocks, rows, strict=True):
            h = history.get(b)
            if h is None:
                h = history[b] = deque(maxlen=keep)
            h.append(row)
        if len(history) > 4 * len(blocks) + 1024:  # bounded: forget blocks no longer candidates
            live = set(blocks)
            for b in [b for b in history if b not in live]:
                del history[b]

    def _windows(self, blocks: list[int], rows: np.ndarray) -> np.ndarray:
        """``[n, L, F]``: each block's history then its current row, edge-padded."""
        n, f = rows.shape
        length = self.scorer.window
        out = np.empty((n, length, f), dtype=np.float32)
        for i, b in enumerate(blocks):
            past = list(self.history.get(b, ()))[-(length - 1) :] if length > 1 else []
            seq = [*past, rows[i]]
            pad = length - len(seq)
            out[i, pad:] = seq
            out[i, :pad] = seq[0]
        return out

    def score(self, now_ms: float, candidates: ChainCandidates, sim: Simulator) -> np.ndarray:
        if self.state is None or self._sim is not sim:
            raise RuntimeError("ModelScorer.score before observer_for(sim): not attached")
        flat = list(chain.from_iterable(candidates.chains))
        if not flat:
            return np.zeros(0)
        blocks = list(dict.fromkeys(flat))  # distinct, first-seen order
        position = {b: i for i, b in enumerate(blocks)}
        rows = self.state.rows(now_ms, blocks)
        x = self._windows(blocks, rows) if self.scorer.window > 0 else rows
        p = np.asarray(self.scorer.score(x), dtype=float)
        return p[np.fromiter(map(position.__getitem__, flat), dtype=np.int64, count=len(flat))]


class ModelPolicy(ReplicatingPolicy):
    """Base router + the decider scoring with an ONNX model (subclasses fix the kind)."""

    kind: str

    def __init__(
        self,
        params: DeciderConfig,
        *,
        num_nodes: int,
        seed: int,
        model: str | Path | None = None,
    ) -> None:
        self.model = str(model) if model is not None else default_model(self.kind)
        super().__init__(params, num_nodes=num_nodes, seed=seed)

    def make_replicator(self, params: DeciderConfig) -> DeciderReplicator:
        scorer = load_scorer(self.model)
        if scorer.kind != self.kind:
            raise ValueError(
                f"{self.model}: a {scorer.kind!r} model, but policy {self.name!r} "
                f"needs a {self.kind!r} model"
            )
        scorer.meta.require_horizon(params.window_ms, self.model)
        return PredictiveReplicator(ModelScorer(scorer), params)


@register_policy("predictive_rule", DeciderConfig)
class PredictiveRulePolicy(ModelPolicy):
    kind = "rule"


@register_policy("predictive_lgbm", DeciderConfig)
class PredictiveLgbmPolicy(ModelPolicy):
    kind = "lgbm"


@register_policy("predictive_tcn", DeciderConfig)
class PredictiveTcnPolicy(ModelPolicy):
    kind = "tcn"


def is_model_policy(name: str) -> bool:
    return name in {f"predictive_{k}" for k in MODEL_KINDS}
