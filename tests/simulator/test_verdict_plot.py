"""``verdict.png``: drawn from the checks' measured figures and limits, one row of panels per
SLO; nothing written when no policy was judged."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import pytest
from verdict_rows import GOAL, routers, row

from kvcast.simulator.verdict import judge
from kvcast.simulator.verdict_plot import PANELS, plot_verdict


def test_each_plotted_check_carries_its_figure_and_its_limit() -> None:
    rows = [*routers(2.0), row("oracle", 0.5, cap=2.4, router="mooncake_conductor"),
            row("oracle", 2.0, cap=2.4, p50=300, router="mooncake_conductor")]  # fmt: skip
    [g] = judge(rows, GOAL)
    checks = {c.name: c for c in g.policies[0].checks}
    gain = checks["capacity_gain"]
    assert gain.measured == pytest.approx(0.2)
    assert (gain.limit, gain.at_least) == (GOAL.capacity_gain, True)
    p50 = checks["p50_at_capacity"]
    assert (p50.measured, p50.limit, p50.at_least) == (-0.25, -GOAL.p50_cut, False)
    for name, _ in PANELS:
        if name in checks and checks[name].met is not None:
            assert checks[name].measured is not None and checks[name].limit is not None, name


def test_the_figure_has_a_row_of_panels_per_slo_and_none_without_a_policy(tmp_path: Path) -> None:
    rows = []
    for slo in ("strict", "loose"):
        on = {"slo_label": slo, "router": "mooncake_conductor"}
        rows += [row("mooncake_conductor", 1.0, cap=2.0, slo_label=slo),
                 row("oracle", 1.0, cap=2.2, **on)]  # fmt: skip
    one = plot_verdict(judge(rows[:2], GOAL), tmp_path / "one.png")
    two = plot_verdict(judge(rows, GOAL), tmp_path / "two.png")
    assert one is not None and two is not None
    h1, h2 = mpimg.imread(one).shape[0], mpimg.imread(two).shape[0]
    assert h2 > 1.8 * h1  # two SLOs: twice the rows
    assert plot_verdict(judge([row("mooncake_conductor", 1.0, cap=2.0)], GOAL),
                        tmp_path / "none.png") is None  # fmt: skip
    assert not (tmp_path / "none.png").exists()
