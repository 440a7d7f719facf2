"""The evaluation plots that depend on what the policies did: written when it applies,
absent otherwise."""

from __future__ import annotations

from pathlib import Path

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
