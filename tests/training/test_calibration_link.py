"""Without a calibration table a model's raw output is served through its declared link: a
margin (LightGBM, rule, TCN) through the sigmoid, a rate (recency) clipped. Never a margin
clipped to [0, 1], which scored most rows 0 and destroyed the ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_training import tiny_config

from kvcast.predictor.calibration import Calibration
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.calibrate import fit_calibration
from kvcast.training.pipeline import run_training


def test_a_one_class_validation_window_serves_the_sigmoid_of_a_margin() -> None:
    margins = np.array([-4.0, -2.5, -1.0, -0.2])
    calib = fit_calibration(margins, np.zeros(4), np.ones(4), "isotonic", link="logit")
    assert calib.is_identity and calib.link == "logit"
    assert calib.apply(margins) == pytest.approx(1.0 / (1.0 + np.exp(-margins)))
    rates = fit_calibration(np.array([0.1, 0.7]), np.zeros(2), np.ones(2), "none")
    assert rates.apply(np.array([-0.5, 0.3, 1.5])).tolist() == [0.0, 0.3, 1.0]


def test_the_link_travels_with_the_model_and_old_models_read_as_probabilities() -> None:
    c = Calibration(link="logit")
    assert Calibration.from_json(c.to_json()) == c
    old = '{"method": "none", "x": [], "y": []}'  # exported before the link was declared
    assert Calibration.from_json(old).link == "probability"
    with pytest.raises(ValueError, match="link"):
        Calibration(link="probit")


def test_lgbm_without_calibration_serves_the_sigmoid_of_its_margin(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    cfg = tiny_config("lgbm", tiny_tables, tmp_path, calibration={"method": "none"})
    scorer = OnnxScorer.load(run_training(cfg).model_path)
    x = np.random.default_rng(0).normal(size=(64, len(scorer.spec))).astype(np.float32)
    raw = scorer.raw(x)
    assert scorer.score(x) == pytest.approx(1.0 / (1.0 + np.exp(-raw)))
