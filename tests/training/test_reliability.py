"""Reliability bins: equal-mass bins follow the rows where skewed probabilities put them;
equal-width bins stay available and give the recorded ``ece``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcast.predictor.metrics import ece
from kvcast.training.reliability import reliability_bins
from kvcast.training.report import plot_reliability

BINS = 15


def skewed(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Burst-like probabilities (mean ~0.06, ~95% below 0.2) and labels drawn from them."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.5, 8.0, n)
    return (rng.random(n) < p).astype(float), p


def test_equal_mass_bins_each_hold_a_bins_share_of_skewed_probabilities() -> None:
    y, p = skewed(30_000)
    assert np.mean(p < 0.2) > 0.9
    uniform = reliability_bins(y, p, np.ones_like(p), BINS, "uniform")
    assert uniform.rows[0] > 0.5 * len(p)  # why: one equal-width bin holds most rows
    quantile = reliability_bins(y, p, np.ones_like(p), BINS, "quantile")
    assert len(quantile.rows) == BINS
    assert np.all(np.abs(quantile.rows - len(p) / BINS) <= 1)
    assert quantile.rows.sum() == len(p) and np.isclose(quantile.weight.sum(), len(p))


def test_the_equal_mass_diagram_draws_the_rows_of_each_bin(tmp_path: Path) -> None:
    """Each point is the mean probability and the observed rate of the consecutive n/bins
    rows by probability (an independent sort): here a model that halves the true rate, so
    every point sits near rate = 2 x probability, including the many below 0.2."""
    y, p_true = skewed(30_000, seed=1)
    p = p_true / 2  # served probabilities: half the true burst rate
    drawn = plot_reliability(y, np.ones_like(p), p, BINS, tmp_path / "rel.png", "quantile")
    assert (tmp_path / "rel.png").stat().st_size > 0
    order = np.argsort(p, kind="mergesort")
    chunks = np.array_split(order, BINS)
    assert np.allclose(drawn.mean_p, [p[c].mean() for c in chunks], rtol=0, atol=1e-12)
    assert np.allclose(drawn.rate, [y[c].mean() for c in chunks], rtol=0, atol=1e-12)
    assert np.sum(drawn.mean_p < 0.1) >= 12  # the points lie where the rows are
    assert np.allclose(drawn.rate, 2 * drawn.mean_p, rtol=0.25, atol=0.01)


def test_equal_mass_bins_hold_equal_weight_when_negatives_are_sampled() -> None:
    """A kept negative stands for 1/keep rows: the bins share the population's weight, not
    the rows kept, as every other metric does."""
    y, p = skewed(40_000, seed=2)
    w = np.where(y > 0, 1.0, 4.0)
    rel = reliability_bins(y, p, w, BINS, "quantile")
    assert len(rel.weight) == BINS
    assert np.all(np.abs(rel.weight - w.sum() / BINS) <= w.max())


def test_rows_sharing_a_probability_stay_in_one_bin() -> None:
    """A bin is a range of probabilities: ties (a rule model's 16 scores) are never split,
    so a value holding half the rows fills one bin and fewer bins come out."""
    p = np.r_[np.full(5000, 0.01), np.linspace(0.02, 0.5, 5000)]
    y = (np.arange(len(p)) % 7 == 0).astype(float)
    rel = reliability_bins(y, p, np.ones_like(p), 10, "quantile")
    assert rel.rows[0] == 5000 and rel.lo[0] == rel.hi[0] == 0.01
    assert len(rel.rows) < 10 and rel.rows.sum() == len(p)
    assert np.all(rel.hi[:-1] < rel.lo[1:])  # disjoint, ordered ranges


def test_the_equal_width_error_is_the_recorded_ece_and_equal_mass_sees_what_it_averages_away() -> (
    None
):
    """Within one wide bin, over-confident and under-confident rows cancel: the equal-width
    ``ece`` reads 0 where every row is off by 0.05; ``ece_quantile`` reads the 0.05."""
    y, p = skewed(20_000, seed=3)
    w = np.ones_like(p)
    assert reliability_bins(y, p, w, BINS, "uniform").ece == pytest.approx(ece(y, p, w, BINS))
    n = 20_000
    p = np.r_[np.full(n, 0.01), np.full(n, 0.06)]  # both in the first of 15 equal-width bins
    y = np.r_[np.arange(n) % 100 < 6, np.arange(n) % 100 < 1].astype(float)  # rates 6%, 1%
    w = np.ones_like(p)
    assert ece(y, p, w, BINS) == pytest.approx(0.0, abs=1e-12)
    assert reliability_bins(y, p, w, BINS, "quantile").ece == pytest.approx(0.05, abs=1e-12)


def test_an_unknown_strategy_is_refused_listing_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: uniform, quantile"):
        reliability_bins(np.ones(2), np.full(2, 0.5), np.ones(2), BINS, "kmeans")
