"""``kvcast quickstart``: the whole pipeline on the bundled trace with embedded defaults.

1. Replays the bundled Mooncake conversation sample into features once and trains the rule and
   LightGBM models on it (time split, calibration, ONNX export, tracked in the local MLflow
   store: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns.db`` in the working directory).
2. Evaluates the anchors' routers, the oracle and the predictive policies (recency, and the two
   models just exported, scored by onnxruntime) at two loads, searches each one's capacity,
   prints the table and writes the plots.
3. Judges the replicating policies against the predictive-replication goal (the loads it
   reads are run too: the best router's capacity and x0.5) and writes ``verdict.json``.

No services, no downloads: everything runs in this process on local files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvcast.cli.common import (
    console,
    fresh_summary,
    no_repeats,
    parse_floats,
    parse_names,
    user_errors,
)
from kvcast.cli.evaluate import default_jobs, run_evaluation
from kvcast.output_paths import output_dir
from kvcast.simulator.config import SimConfig
from kvcast.simulator.goal_config import GoalConfig
from kvcast.simulator.model_scorer import is_model_policy
from kvcast.simulator.policies import policy_names

TRACE = "bundled:conversation"
KINDS = ("rule", "lgbm")


def train_models(out: Path, track: bool, trace: str = TRACE) -> dict[str, str]:
    """Train every kind of :data:`KINDS` on one replay of the bundled trace -> ONNX paths."""
    from kvcast.training.config import TrainConfig
    from kvcast.training.pipeline import load_data, run_training
    from kvcast.training.tracking import check_store

    models: dict[str, str] = {}
    data = None
    with console.status("replaying the trace into features") as status:
        for kind in KINDS:
            cfg = TrainConfig.model_validate(
                {
                    "data": {"trace": trace},
                    "model": {"kind": kind},
                    "tracking": {"enabled": track},
                    "out_dir": str(out / "train" / kind),
                }
            )
            if data is None:
                if track:
                    check_store(cfg.tracking)  # before the replay, not after it
                data = load_data(cfg)
            result = run_training(
                cfg, stage=lambda s, k=kind: status.update(f"train {k}: {s}"), data=data
            )
            test = result.metrics["test"]
            console.print(
                f"trained [bold]{kind}[/]: test PR-AUC {test['pr_auc']:.3f}, "
                f"ECE {test['ece']:.3f} (equal-width bins; equal-mass: "
                f"{test['ece_quantile']:.3f}) -> {result.model_path}"
                + (f" (MLflow {result.registered}, champion {result.champion})" if track else "")
            )
            models[kind] = str(result.model_path)
    return models


@user_errors
def quickstart_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/quickstart"
    ),
    track: Annotated[
        bool, typer.Option("--track/--no-track", help="Track the training runs in MLflow.")
    ] = True,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", help="Worker processes (default: the CPU count, at most 8)."),
    ] = None,
    trace: Annotated[str, typer.Option("--trace", help="Trace file, or bundled:NAME.")] = TRACE,
    policies: Annotated[
        str,
        typer.Option("--policies", help="Comma-separated policies to compare, or 'all'."),
    ] = "all",
    time_scale: Annotated[
        str, typer.Option("--time-scale", help="Comma-separated loads, e.g. 1,2.")
    ] = "1,2",
    capacity: Annotated[
        bool, typer.Option("--capacity/--no-capacity", help="Search each policy's capacity.")
    ] = True,
    verdict: Annotated[
        bool,
        typer.Option(
            "--verdict/--no-verdict",
            help="Judge the replicating policies against the goal (with --capacity only).",
        ),
    ] = True,
) -> None:
    """Train the models, then compare every policy on the bundled trace (no services).

    Defaults: the bundled conversation sample, loads 1 and 2, capacity searched, the
    replicating policies judged against the predictive-replication goal (kvcast verdict)."""
    console.print(
        f"[bold]kvcast quickstart[/]: {trace}, "
        "embedded defaults (8 nodes, Llama-3-70B fp16 KV, 100 Gb/s)"
    )
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    loads = parse_floats(time_scale, "--time-scale")
    names = policy_names() if policies == "all" else parse_names(policies)
    no_repeats(names, "--policies")  # before the training, not after it
    unknown = sorted(set(names) - set(policy_names()))
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; valid: {', '.join(policy_names())}")
    untrained = [
        n for n in names if is_model_policy(n) and n.removeprefix("predictive_") not in KINDS
    ]
    names = [n for n in names if n not in untrained]
    if untrained:  # decided before the training, not after it
        console.print(f"skipping {', '.join(untrained)}: quickstart trains {', '.join(KINDS)} only",
                      highlight=False)  # fmt: skip
    if not names:
        raise ValueError(f"--policies: nothing left to run ({policies!r})")
    output_dir(out)  # before the training: never an errno after it
    fresh_summary(out)  # an earlier run's results go before the models they were judged on
    models = train_models(out, track, trace)
    run_evaluation(
        trace, "auto", SimConfig(), names, loads, capacity, out, models=models,
        jobs=jobs or default_jobs(), goal=GoalConfig() if verdict and capacity else None,
    )  # fmt: skip
