"""The shadow evaluation's figure: the calibration it plots, and a PNG for any outcome set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvcast.predictor.shadow_plots import calibration, plot_shadow


def outcomes(p: list[float], hit: list[bool], censored: list[bool] | None = None) -> pd.DataFrame:
    n = len(p)
    lead = np.where(hit, 500.0, np.nan)
    return pd.DataFrame({
        "hit": hit, "p_hit": p, "lead_ms": lead, "transfer_ms": np.full(n, 100.0),
        "censored": censored if censored is not None else [False] * n,
        "bytes": np.full(n, 1 << 20),
    })  # fmt: skip


def test_calibration_bins_by_p_and_reports_the_share_hit() -> None:
    p = [0.1] * 10 + [0.9] * 10
    hit = [i == 0 for i in range(10)] + [i < 9 for i in range(10)]
    cal = calibration(outcomes(p, hit), bins=4)
    assert cal["decisions"].tolist() == [10, 10]
    assert cal["p_mean"].tolist() == pytest.approx([0.1, 0.9])
    assert cal["hit_rate"].tolist() == pytest.approx([0.1, 0.9])


def test_calibration_leaves_out_censored_decisions() -> None:
    # the censored misses would pull the bin's hit rate down if they counted
    o = outcomes([0.5] * 4, [True, True, False, False], censored=[False, False, True, True])
    cal = calibration(o)
    assert cal["decisions"].tolist() == [2] and cal["hit_rate"].tolist() == [1.0]


def test_calibration_of_nothing_is_empty() -> None:
    assert len(calibration(outcomes([], []))) == 0


@pytest.mark.parametrize("hits", [True, False])
def test_plot_is_a_png_with_or_without_hits(tmp_path: Path, hits: bool) -> None:
    path = plot_shadow(outcomes([0.2, 0.7], [hits, hits]), tmp_path / "s.png", 0.9, "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_calibration_legend_leaves_the_points_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an under-confident decider (every bin hit): its points lie along the top edge, where a
    # legend fixed in the upper left corner covered them
    import kvcast.predictor.shadow_plots as shadow_plots

    figs: list = []
    monkeypatch.setattr(shadow_plots.plt, "close", figs.append)
    p = np.linspace(0.05, 0.8, 50).tolist()
    plot_shadow(outcomes(p, [True] * 50), tmp_path / "s.png", 0.9)
    ax = figs[0].axes[2]
    box = ax.get_legend().get_window_extent()
    centres = ax.transData.transform(ax.collections[0].get_offsets())
    assert not [c for c in centres if box.contains(*c)]


def test_the_plots_verdict_is_the_go_live_rules_min_hits_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every hit covered but fewer than min_hits of them: the figure says fail, as the CLI's
    go-live line does (it said pass)."""
    import kvcast.predictor.shadow_plots as shadow_plots

    figs: list = []
    monkeypatch.setattr(shadow_plots.plt, "close", figs.append)
    o = outcomes([0.5, 0.5], [True, True])
    plot_shadow(o, tmp_path / "a.png", 0.9, min_hits=20)
    plot_shadow(o, tmp_path / "b.png", 0.9, min_hits=2)
    titles = [fig.axes[0].get_title() for fig in figs]
    assert titles[0].endswith("(needs 90%, 20 hits): fail"), titles[0]
    assert titles[1].endswith("(needs 90%): pass"), titles[1]
