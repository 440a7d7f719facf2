"""The evaluation plots that depend on what the policies did: written when it applies,
absent otherwise."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kvcast.simulator.evaluation import Evaluation
from kvcast.simulator.plots import plot_copy_fates

FATES = {"used": 6, "routed_to_source": 2, "routed_elsewhere": 1, "expired": 1, "unsettled": 0}


def summary(policy: str, time_scale: float, **extra: object) -> dict[str, object]:
    return {"policy": policy, "time_scale": time_scale, **extra}


def test_copy_fates_are_plotted_for_the_policies_that_made_copies(tmp_path: Path) -> None:
    ev = Evaluation(summaries=[
        summary("mooncake_conductor", 1.0),
        summary("oracle", 1.0, copy_fates=FATES),
        summary("oracle", 2.0, copy_fates=dict.fromkeys(FATES, 0)),  # no copy: no bar
    ])  # fmt: skip
    out = plot_copy_fates(ev, tmp_path / "copy_fates.png")
    assert out is not None and out.stat().st_size > 1000


def test_no_copy_fates_plot_without_copies(tmp_path: Path) -> None:
    none = dict.fromkeys(FATES, 0)
    ev = Evaluation(summaries=[summary("dynamo_kv", 1.0), summary("oracle", 1.0, copy_fates=none)])
    assert plot_copy_fates(ev, tmp_path / "copy_fates.png") is None
    assert not (tmp_path / "copy_fates.png").exists()


def test_seconds_on_a_log_axis_read_as_plain_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # P99 from 11.5 s to 18 s: within one decade, so only minor ticks are labelled, and
    # matplotlib's default wrote them as "1.2 x 10^1" rather than "12"
    import kvcast.simulator.plots as plots

    figs: list = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    ttft = [{"p50": 90.0, "p99": 11_500.0}, {"p50": 3_000.0, "p99": 18_000.0}]  # P50 from 0.09 s
    ev = Evaluation(summaries=[
        summary("dynamo_kv", x, ttft_ms=t, slo_attainment=0.8, goodput_rps=2.0)
        for x, t in zip((1.0, 2.0), ttft, strict=True)
    ])  # fmt: skip
    plots.plot_p99_vs_load(ev, tmp_path / "p99.png")
    plots.plot_goodput_vs_load(ev, tmp_path / "goodput.png")
    for fig, panel in ((figs[0], 0), (figs[1], 1)):
        fig.canvas.draw()
        ax = fig.axes[panel]
        labels = [t.get_text() for t in (*ax.get_yticklabels(), *ax.get_yticklabels(minor=True))]
        shown = [s for s in labels if s]
        assert shown and not [s for s in shown if "times" in s or "^" in s or "e" in s], shown


def test_every_policy_line_looks_different_past_ten_policies() -> None:
    """matplotlib's 10 colours repeat from the 11th line: an evaluation of every router (12
    or more) drew two policies alike. Each name gets its own colour, line style and marker,
    the same in every plot of one evaluation."""
    from kvcast.simulator.plots import line_styles

    names = [f"policy_{i}" for i in range(25)]
    styles = line_styles(names)
    looks = {(s["color"], s["linestyle"], s["marker"]) for s in styles.values()}
    assert len(looks) == len(names)
    assert line_styles(names) == styles


def test_a_run_whose_copies_went_unused_draws_no_lead_time() -> None:
    """Its summary says 0.0 ms (none); the plot must not draw a lead time of 0 s."""
    import math

    from kvcast.simulator.plots import lead_time_s

    unused = {"mean_lead_time_ms": 0.0, "replication_hit_rate": 0.0}  # an older summary
    assert math.isnan(lead_time_s(unused))
    assert math.isnan(lead_time_s({"mean_lead_time_ms": None, "replication_hit_rate": None}))
    assert lead_time_s({"mean_lead_time_ms": 2500.0, "replication_hit_rate": 0.3}) == 2.5


def test_a_plot_that_no_longer_applies_is_removed_from_the_folder(tmp_path: Path) -> None:
    """Evaluated again into the same folder without a replicating policy, the earlier run's
    replication, copy-fate and budget plots would stay beside a summary they contradict."""
    import pandas as pd

    from kvcast.simulator.plots import write_plots

    stale = ("replication.png", "copy_fates.png", "waste_vs_budget.png")
    for name in stale:
        (tmp_path / name).write_bytes(b"an earlier run's plot")
    row = {"ttft_ms": {"p50": 90.0, "p99": 900.0}, "slo_attainment": 1.0, "goodput_rps": 2.0,
           "bytes_replicated": 0, "bytes_wasted": 0}  # fmt: skip
    ev = Evaluation(
        summaries=[summary("dynamo_kv", 1.0, **row)],
        ttft={("dynamo_kv", 1.0): pd.Series([80.0, 90.0, 900.0])},
    )
    written = write_plots(ev, tmp_path)
    assert {p.name for p in written} == {"ttft_cdf.png", "p99_vs_load.png", "goodput_vs_load.png"}
    assert not [name for name in stale if (tmp_path / name).exists()]


def test_the_ttft_cdf_says_which_requests_it_leaves_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejected request has no TTFT: the CDF is over the served ones and reaches 1.0 for a
    policy that rejected some, so it must say so, as the table's warning does."""
    import pandas as pd

    import kvcast.simulator.plots as plots

    figs: list = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    ev = Evaluation(
        summaries=[summary("mooncake_conductor", 1.0, requests=10, rejected=3),
                   summary("dynamo_kv", 1.0, requests=10, rejected=0)],
        ttft={("mooncake_conductor", 1.0): pd.Series([100.0] * 7),
              ("dynamo_kv", 1.0): pd.Series([200.0] * 10)},
    )  # fmt: skip
    plots.plot_ttft_cdf(ev, tmp_path / "cdf.png")
    ax = figs[0].axes[0]
    assert ax.get_ylabel() == "fraction of served requests"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["mooncake_conductor (3 of 10 rejected)", "dynamo_kv"]


def _labelled_ticks(ax) -> tuple[tuple[float, float], list[float]]:
    """The y axis's view and the values of its ticks in view that carry a label."""
    lo, hi = ax.get_ylim()
    ticks = [*ax.yaxis.get_major_ticks(), *ax.yaxis.get_minor_ticks()]
    shown = sorted(t.get_loc() for t in ticks if t.label1.get_text() and lo <= t.get_loc() <= hi)
    return (lo, hi), shown


@pytest.mark.parametrize(
    "p99_s",
    [(11.0, 19.0, 45.0), (11.5, 18.0), (0.4, 12.0, 45.0), (2.0, 300.0), (11.5, 13.2, 16.0, 51.2)],
)
def test_every_part_of_the_p99_log_axis_has_a_label_near_it(
    p99_s: tuple[float, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Curves at 11-19 s on an axis up to 48 s had no label below 20 s (matplotlib labelled
    only 20, 30, 40 of the decade): at least three labels in view, none further than a quarter
    of the axis (in log units) from the next label or the axis's ends."""
    import kvcast.simulator.plots as plots

    figs: list = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    ev = Evaluation(summaries=[
        summary("dynamo_kv", float(i + 1), ttft_ms={"p50": 90.0, "p99": p * 1e3},
                slo_attainment=0.8, goodput_rps=2.0)
        for i, p in enumerate(p99_s)
    ])  # fmt: skip
    plots.plot_p99_vs_load(ev, tmp_path / "p99.png")
    figs[0].canvas.draw()
    (lo, hi), shown = _labelled_ticks(figs[0].axes[0])
    assert len(shown) >= 3, shown
    edges = np.log10([lo, *shown, hi])
    assert np.diff(edges).max() <= (edges[-1] - edges[0]) / 4, shown
    if min(p99_s) >= 11 and max(p99_s) < 50:
        assert [v for v in shown if 11 <= v <= 19], shown  # where the curves sit


def test_a_run_that_copied_nothing_draws_no_wasted_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No byte copied is no byte wasted, but not a policy that wastes nothing: the waste panel
    leaves the point out (NaN), as the hit-rate panel beside it does, instead of drawing 0.0."""
    import kvcast.simulator.plots as plots

    figs: list = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    copied = {"bytes_replicated": 1000, "bytes_wasted": 200, "replication_hit_rate": 0.5,
              "mean_lead_time_ms": 800.0}  # fmt: skip
    none = {"bytes_replicated": 0, "bytes_wasted": 0, "replication_hit_rate": None,
            "mean_lead_time_ms": None}  # fmt: skip
    ev = Evaluation(summaries=[summary("oracle", 1.0, **copied), summary("oracle", 2.0, **none)])
    assert plots.plot_replication(ev, tmp_path / "replication.png") is not None
    hit, _, waste = (ax.get_lines()[0].get_ydata() for ax in figs[0].axes)
    assert np.isnan(hit[1]) and hit[0] == 0.5
    assert waste[0] == pytest.approx(0.2)
    assert np.isnan(waste[1]), waste
    assert math.isnan(plots.wasted_share(none))
