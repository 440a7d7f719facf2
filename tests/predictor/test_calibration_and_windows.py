"""The calibration post-step is a declared table applied identically everywhere; history
windows hold only the row's own block, oldest first."""

from __future__ import annotations

import numpy as np
import pytest

from kvcast.predictor.calibration import Calibration
from kvcast.predictor.recency_table import RecencyTable
from kvcast.predictor.windows import window_index
from kvcast.training.calibrate import fit_calibration


def test_the_table_is_linear_between_knots_and_flat_beyond() -> None:
    c = Calibration("isotonic", (0.0, 1.0, 3.0), (0.1, 0.2, 0.6))
    np.testing.assert_allclose(c.apply(np.array([-5, 0.5, 2.0, 9.0])), [0.1, 0.15, 0.4, 0.6])
    assert Calibration.from_json(c.to_json()) == c


def test_a_decreasing_table_is_refused() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        Calibration("isotonic", (1.0, 0.0), (0.1, 0.2))


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_fitted_calibration_is_increasing_and_brings_rates_close(method: str) -> None:
    rng = np.random.default_rng(0)
    raw = rng.standard_normal(20000)
    y = (rng.random(20000) < 1 / (1 + np.exp(-(2 * raw - 3)))).astype(float)
    c = fit_calibration(raw, y, np.ones_like(raw), method, 32)
    p = c.apply(raw)
    assert np.all(np.diff(c.y) > 0) and len(c.x) <= 32
    assert abs(p.mean() - y.mean()) < 0.01


def test_recency_bins_match_the_graph_rule_and_nan_goes_last() -> None:
    t = RecencyTable((10.0, 100.0), (0.5, 0.2, 0.1))
    np.testing.assert_allclose(
        t.predict(np.array([0.0, 10.0, 99.0, 1e9, np.nan])), [0.5, 0.2, 0.2, 0.1, 0.1], rtol=1e-6
    )


def test_windows_take_the_last_rows_of_the_same_block_with_edge_padding() -> None:
    block = np.array([2, 1, 2, 1, 2, 2], np.uint64)
    tick = np.array([0, 0, 5, 5, 10, 15], float)
    idx = window_index(block, tick, 3)
    np.testing.assert_array_equal(idx[5], [2, 4, 5])  # block 2 at t=15: t=5, 10, 15
    np.testing.assert_array_equal(idx[0], [0, 0, 0])  # first row: padded with itself
    np.testing.assert_array_equal(idx[3], [1, 1, 3])  # block 1 at t=5
    assert (block[idx] == block[:, None]).all()
    assert (np.diff(tick[idx], axis=1) >= 0).all()
