"""Metrics match scikit-learn with weights, and weights make a sampled table count like the
full one."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from kvcast.predictor.metrics import (
    METRIC_NAMES,
    average_precision,
    budget_share,
    ece,
    evaluate,
    mean_lead_time,
    roc_auc,
)


@pytest.fixture
def scored() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    y = (rng.random(2000) < 0.1).astype(float)
    p = np.round(np.clip(0.1 + 0.3 * y + 0.2 * rng.standard_normal(2000), 0, 1), 2)  # ties
    w = np.where(y > 0, 1.0, rng.choice([1.0, 4.0], 2000))
    return y, p, w


def test_average_precision_and_roc_auc_equal_sklearn_with_weights(scored) -> None:
    y, p, w = scored
    assert average_precision(y, p, w) == pytest.approx(
        average_precision_score(y, p, sample_weight=w)
    )
    assert roc_auc(y, p, w) == pytest.approx(roc_auc_score(y, p, sample_weight=w))


def test_a_weight_of_two_counts_like_a_duplicated_row(scored) -> None:
    y, p, _ = scored
    w = np.where(np.arange(len(y)) % 2 == 0, 2.0, 1.0)
    dup = np.repeat(np.arange(len(y)), w.astype(int))
    ones = np.ones(len(dup))
    assert average_precision(y, p, w) == pytest.approx(average_precision(y[dup], p[dup], ones))
    assert ece(y, p, w) == pytest.approx(ece(y[dup], p[dup], ones))


def test_a_perfectly_calibrated_constant_has_no_calibration_error() -> None:
    y = np.array([1, 0, 0, 0] * 50, float)
    assert ece(y, np.full(len(y), 0.25), np.ones(len(y))) == pytest.approx(0.0)


def test_the_budget_takes_k_units_of_weight_per_tick_best_first() -> None:
    tick = np.array([0, 0, 0, 1, 1])
    p = np.array([0.9, 0.5, 0.1, 0.2, 0.3])
    w = np.array([1.0, 4.0, 1.0, 1.0, 1.0])
    share = budget_share(tick, p, w, k=2)
    np.testing.assert_allclose(share, [1.0, 0.25, 0.0, 1.0, 1.0])


def test_lead_time_counts_each_burst_once_from_its_earliest_selecting_tick() -> None:
    caught = np.array([True, True, True])
    block = np.array([7, 7, 8], np.uint64)
    tick = np.array([0.0, 5000.0, 0.0])
    next_ms = np.array([12000.0, 7000.0, 3000.0])  # block 7 arrives at 12 s, block 8 at 3 s
    assert mean_lead_time(caught, block, tick, next_ms) == pytest.approx((12000 + 3000) / 2)


def test_evaluate_reports_every_metric_name(scored) -> None:
    y, p, w = scored
    tick = np.repeat(np.arange(20), 100).astype(float)
    out = evaluate(p, y, w, tick, np.arange(2000, dtype=np.uint64), np.full(2000, 1000.0))
    assert tuple(out) == METRIC_NAMES
    assert out["rows"] == 2000 and out["positives"] == int(y.sum())
    assert 0 <= out["precision_at_budget"] <= 1 and 0 <= out["recall_at_budget"] <= 1


def test_a_zero_weight_row_at_the_budget_edge_takes_nothing_and_breaks_nothing() -> None:
    from kvcast.predictor.metrics import budget_share, evaluate

    share = budget_share(np.zeros(2), np.array([0.9, 0.1]), np.array([1.0, 0.0]), 1)
    assert share.tolist() == [1.0, 0.0]  # the budget of 1 is filled by the first row
    m = evaluate(np.array([0.9, 0.1]), np.array([1.0, 0.0]), np.array([1.0, 0.0]), np.zeros(2),
                 np.array([1, 2]), np.array([5.0, np.inf]), budget_k=1)  # fmt: skip
    assert (m["precision_at_budget"], m["recall_at_budget"]) == (1.0, 1.0)


@pytest.mark.parametrize("bad", [float("nan"), -0.5, 1.7])
def test_a_probability_outside_0_1_is_refused_naming_its_row(bad: float) -> None:
    y, w = np.array([0.0, 1.0, 0.0]), np.ones(3)
    p = np.array([0.2, bad, 0.4])
    with pytest.raises(ValueError, match=rf"row 1 is {bad!r}"):
        ece(y, p, w)
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        evaluate(p, y, w, np.zeros(3), np.arange(3), np.ones(3))
