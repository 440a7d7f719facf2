"""``predictive_lgbm`` / ``predictive_rule`` in the simulator: a real LightGBM model trained by
the training pipeline, exported to ONNX and scored by onnxruntime over the sidecar's
``FeatureState``, fed with the simulator's own event stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcast.features.events import Event
from kvcast.features.online.state import FeatureState
from kvcast.features.traces import Trace
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.predictor.scorer import OnnxScorer
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import Simulator
from kvcast.simulator.model_scorer import ModelScorer, model_feature_config
from kvcast.simulator.recording import feature_config_for
from kvcast.simulator.replication_policies import make_policy
from kvcast.training.config import TrainConfig
from kvcast.training.pipeline import run_training


@pytest.fixture(scope="module")
def lgbm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lgbm")
    cfg = TrainConfig.model_validate(
        {
            "data": {"trace": "bundled:conversation"},
            "model": {"kind": "lgbm", "num_boost_round": 8, "min_data_in_leaf": 20,
                      "num_threads": 1},
            "tracking": {"enabled": False},
            "out_dir": str(out),
        }
    )  # fmt: skip
    return run_training(cfg).model_path


class RecordingScorer(ModelScorer):
    """The real scorer, remembering what it answered at each tick."""

    def __init__(self, scorer: OnnxScorer, stream: list[Event]) -> None:
        super().__init__(scorer)
        self.stream = stream  # every event the simulator emitted so far
        self.answers: list[tuple[float, int, list[int], np.ndarray]] = []

    def score(self, now_ms: float, candidates: ChainCandidates, sim: Simulator) -> np.ndarray:
        p = super().score(now_ms, candidates, sim)
        blocks = [b for chain in candidates.chains for b in chain]
        self.answers.append((now_ms, len(self.stream), blocks, p))
        return p


def test_the_scorer_sees_exactly_the_events_up_to_each_tick(
    lgbm_model: Path, bundled_head: Trace
) -> None:
    cfg = SimConfig()
    policy = make_policy("predictive_lgbm", cfg, DeciderConfig(), {"lgbm": str(lgbm_model)})
    onnx = OnnxScorer.load(lgbm_model)
    events: list[Event] = []
    spy = RecordingScorer(onnx, events)
    policy.inner.scorer = spy  # type: ignore[attr-defined]
    sim = Simulator(bundled_head, cfg, policy, observers=[events.append])
    sim.run()
    answered = [a for a in spy.answers if len(a[2])]
    assert len(answered) >= 10
    # an independent state fed with the recorded stream gives the same probabilities
    replay = FeatureState(feature_config_for(cfg, bundled_head, model_feature_config(onnx)))
    i = 0
    for now, seen, blocks, p in answered:
        replay.update_many(events[i:seen])
        i = seen
        expected = onnx.score(replay.rows(now, list(dict.fromkeys(blocks))))
        lookup = dict(zip(dict.fromkeys(blocks), expected, strict=True))
        np.testing.assert_allclose(p, [lookup[b] for b in blocks], rtol=0, atol=1e-12)
    assert {float(x) for *_, p in answered for x in p} != {0.0}  # it does score


def test_a_model_policy_runs_in_the_simulator_within_its_budgets(
    lgbm_model: Path, bundled_head: Trace
) -> None:
    cfg = SimConfig()
    policy = make_policy("predictive_lgbm", cfg, DeciderConfig(), {"lgbm": str(lgbm_model)})
    res = Simulator(bundled_head, cfg, policy, time_scale=2.0).run()
    s = res.summary
    assert s["policy"] == "predictive_lgbm" and s["requests"] == len(bundled_head)
    assert s["active_evictions_by_speculative"] == 0
    assert s["peak_speculative_bytes_over_quota"] == 0
    assert s["model"] == str(lgbm_model)  # which model scored is in the summary


def test_a_model_no_policy_of_the_run_scores_with_is_refused_not_ignored(
    lgbm_model: Path, tmp_path: Path
) -> None:
    """A bare --model is read as the kind it declares: an lgbm model given to a run of
    predictive_rule (or of a plain router) was ignored, and the rule policy scored with its
    MLflow champion."""
    from typer.testing import CliRunner

    from kvcast.cli.app import app

    for args in (["simulate", "--policy", "predictive_rule"],
                 ["simulate", "--policy", "dynamo_kv"],
                 ["evaluate", "--policies", "dynamo_kv,predictive_rule"]):  # fmt: skip
        r = CliRunner().invoke(app, [*args, "--trace", "bundled:conversation", "--model",
                                     str(lgbm_model), "--out", str(tmp_path / "o")])  # fmt: skip
        out = " ".join(r.output.split())
        assert r.exit_code == 2, out
        want = f"--model {lgbm_model}: a model of kind lgbm, but no predictive_lgbm policy runs"
        assert want in out


def test_a_model_of_another_kind_is_refused_with_both_kinds_named(lgbm_model: Path) -> None:
    with pytest.raises(ValueError, match=r"'lgbm' model.*predictive_rule.*'rule'"):
        make_policy("predictive_rule", SimConfig(), DeciderConfig(), {"rule": str(lgbm_model)})


def test_a_missing_model_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such model file"):
        make_policy("predictive_lgbm", SimConfig(), None, {"lgbm": str(tmp_path / "absent.onnx")})


def test_without_a_model_the_champion_is_looked_up_and_its_absence_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(ValueError, match=r"models:/kvcast-lgbm@champion: no MLflow store at .*"):
        make_policy("predictive_lgbm", SimConfig())
    assert not (tmp_path / "empty.db").exists()  # looking the champion up creates no store


@pytest.fixture(scope="module")
def tcn_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tcn")
    cfg = TrainConfig.model_validate(
        {
            "data": {"trace": "bundled:conversation", "negative_keep": 1.0},
            "model": {"kind": "tcn", "window": 3, "channels": 4, "epochs": 1,
                      "batch_size": 256, "max_train_windows": 2000},
            "tracking": {"enabled": False},
            "out_dir": str(out),
        }
    )  # fmt: skip
    return run_training(cfg).model_path


def test_a_sequence_model_scores_each_block_over_its_feature_tick_history(
    tcn_model: Path, bundled_head: Trace
) -> None:
    cfg = SimConfig()
    policy = make_policy("predictive_tcn", cfg, DeciderConfig(), {"tcn": str(tcn_model)})
    events: list[Event] = []
    sim = Simulator(bundled_head, cfg, policy, observers=[events.append])
    res = sim.run()
    assert res.summary["peak_speculative_bytes_over_quota"] == 0
    scorer = policy.inner.scorer  # type: ignore[attr-defined]
    assert scorer.scorer.window == 3 and scorer.history
    # the history kept online is the rows of the offline rule: every candidate of every
    # feature tick, from a state that has seen exactly the events up to that tick
    fcfg = scorer.state.cfg
    replay = FeatureState(fcfg)
    period, tick = fcfg.ticks.period_ms, events[0].ts_ms
    expected: dict[int, list[np.ndarray]] = {}
    i = 0
    last_ts = max(e.ts_ms for e in events)
    while tick < last_ts:
        while i < len(events) and events[i].ts_ms <= tick:
            replay.update(events[i])
            i += 1
        blocks = replay.candidates(tick)
        if blocks:
            for b, row in zip(blocks, replay.rows(tick, blocks), strict=True):
                expected.setdefault(b, []).append(row)
        tick += period
    checked = 0
    for b, h in scorer.history.items():
        want = expected[b][-len(h) :]
        np.testing.assert_array_equal(np.array(list(h)), np.array(want))
        checked += 1
    assert checked > 0


def test_a_decider_window_other_than_the_model_horizon_is_refused(lgbm_model: Path) -> None:
    from kvcast.predictor.model_meta import HorizonMismatch

    other = DeciderConfig(window_ms=120_000.0)  # the model's labels: within 30 s
    with pytest.raises(HorizonMismatch, match=r"within 30000 ms .* window_ms is 120000"):
        make_policy("predictive_lgbm", SimConfig(), other, {"lgbm": str(lgbm_model)})
