"""``kvcast evaluate``: compare policies across loads through the cluster simulator, with
capacity search and the goal check (``--verdict``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kvcast.cli.common import (
    fresh_summary,
    no_repeats,
    open_trace,
    out_console,
    parse_floats,
    parse_models,
    parse_names,
    plural,
    progress_bar,
    unused_models,
    user_errors,
    write_json,
)
from kvcast.cli.simulate import (
    ConfigOpt,
    DeciderOpt,
    FormatOpt,
    ModelOpt,
    NodesOpt,
    SkipBadOpt,
    TraceOpt,
    decider_for,
    note_spread,
    sim_config,
    warn_rejections,
)
from kvcast.cli.summary_table import summary_table
from kvcast.cli.verdict import GoalOpt
from kvcast.config import parse_config
from kvcast.features.traces import Trace
from kvcast.output_paths import output_dir
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.config import SimConfig, SLOConfig
from kvcast.simulator.evaluation import (
    Evaluation,
    check_inputs,
    count_steps,
    evaluate,
    slo_label,
    with_loads,
)
from kvcast.simulator.goal_config import GoalConfig, load_goal_config
from kvcast.simulator.policies import policy_names
from kvcast.simulator.verdict import loads_needed


def run_evaluation(
    tr_spec: str,
    fmt: str,
    cfg: SimConfig,
    policies: list[str],
    scales: list[float],
    capacity: bool,
    out: Path,
    skip_bad: bool = False,
    decider: DeciderConfig | None = None,
    models: dict[str, str] | None = None,
    slos: list[SLOConfig] | None = None,
    quotas_gib: list[float] | None = None,
    jobs: int = 1,
    goal: GoalConfig | None = None,
) -> Evaluation:
    """Evaluate, print the table, write the summaries and plots; with a ``goal``, also search
    capacities, run the loads its verdict reads and print and write the verdict."""
    capacity = capacity or goal is not None
    unplayable: dict[float, str] = {}  # loads the verdict reads that the trace cannot take
    if not policies:
        raise ValueError("--policies: no policy to run")
    no_repeats(policies, "--policies")
    no_repeats(scales, "--time-scale")
    no_repeats([slo_label(s) for s in slos or []], "--slo")
    no_repeats(quotas_gib or [], "--quota-gib")
    output_dir(out)
    tr = open_trace(tr_spec, fmt, skip_bad=skip_bad)
    note_spread(tr, cfg)
    total = count_steps(policies, scales, len(slos or []), len(quotas_gib or []))
    done = 0
    with progress_bar(None if capacity else total, "evaluate") as update:

        def step(label: str) -> None:
            nonlocal done
            done += 1
            update(done, max(done, total))

        ev = evaluate(
            tr, cfg, policies, scales, capacity=capacity, on_step=step, decider=decider,
            models=models, slos=slos, quotas_gib=quotas_gib, jobs=jobs,
        )  # fmt: skip
        extra = loads_needed(ev.summaries, goal) if goal is not None else []
        extra = [x for x in extra if playable(tr, cfg, policies, x, slos, unplayable)]
        if extra:  # the bar's capacity load and the low load, for every policy
            total = done + count_steps(policies, extra, len(slos or []), len(quotas_gib or []))
            more = evaluate(
                tr, cfg, policies, extra, on_step=step, decider=decider, models=models,
                slos=slos, quotas_gib=quotas_gib, jobs=jobs,
            )  # fmt: skip
            ev = with_loads(ev, more)
    summary = fresh_summary(out)
    from kvcast.simulator.plots import write_plots  # matplotlib: lazily

    written = write_plots(ev, out)
    write_json(summary, ev.summaries)
    out_console.print(
        summary_table(ev.summaries, f"{tr.name}: {plural(len(tr), 'request')}, {cfg.nodes} nodes")
    )
    for line in capacity_notes(ev):
        out_console.print(escape(line), highlight=False)
    warn_rejections(ev.summaries)
    out_console.print(escape(f"wrote {out}/summary.json, " + ", ".join(p.name for p in written)))
    if goal is not None:
        from kvcast.cli.verdict import print_verdict

        for x, why in unplayable.items():
            out_console.print(escape(f"the goal's load x{x:g} cannot be played: {why}"))
        print_verdict(out_console, ev.summaries, goal, out / "verdict.json", unplayable)
    return ev


def playable(
    tr: Trace, cfg: SimConfig, policies: list[str], x: float, slos: list[SLOConfig] | None,
    unplayable: dict[float, str],
) -> bool:  # fmt: skip
    """Whether ``tr`` can be played at ``x`` (else its reason is noted in ``unplayable``): a
    load the verdict adds is left out, not the end of an evaluation already run."""
    try:
        check_inputs(tr, cfg, policies, [x], slos)
    except ValueError as err:
        unplayable[x] = str(err)
        return False
    return True


def capacity_notes(ev: Evaluation) -> list[str]:
    """One line per capacity search that stopped at an edge: the figure is a bound only."""
    lines = []
    for label, cap in ev.capacity.items():
        if cap.bound == "upper":
            line = (f"capacity of {label}: at least x{cap.time_scale:g}, the highest load "
                    "searched (the SLO target is still met there)")  # fmt: skip
        elif cap.bound == "lower":
            line = (f"capacity of {label}: below x{cap.bound_time_scale:g}, the lowest load "
                    "searched (the SLO target is met at none)")  # fmt: skip
        else:
            continue
        lines.append(line + (f"; the search stopped there: {cap.note}" if cap.note else ""))
    return lines


def parse_slo(text: str, base: SLOConfig) -> SLOConfig:
    """``length_aware``, ``length_aware:FLOOR_MS:FACTOR`` or ``absolute:TTFT_MS``."""
    mode, *args = [p.strip() for p in text.split(":")]
    update: dict[str, object] | None = None
    try:
        if mode == "length_aware" and len(args) in (0, 2):
            update = {"mode": mode}
            if args:
                update |= {"floor_ms": float(args[0]), "factor": float(args[1])}
        elif mode == "absolute" and len(args) == 1:
            update = {"mode": mode, "ttft_ms": float(args[0])}
    except ValueError:
        update = None
    if update is None:
        raise ValueError(
            f"--slo {text!r}: expected length_aware, length_aware:FLOOR_MS:FACTOR "
            "or absolute:TTFT_MS"
        )
    return parse_config(SLOConfig, base.model_dump() | update, source=f"--slo {text}")


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


@user_errors
def evaluate_cmd(
    trace: TraceOpt,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policies, or 'all'.")
    ] = "all",
    format: FormatOpt = "auto",
    config: ConfigOpt = None,
    nodes: NodesOpt = None,
    time_scale: Annotated[
        str, typer.Option("--time-scale", help="Comma-separated loads, e.g. 1,2,4.")
    ] = "1",
    capacity: Annotated[
        bool, typer.Option("--capacity", help="Also search each policy's capacity.")
    ] = False,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/evaluate"
    ),
    skip_bad: SkipBadOpt = False,
    decider_config: DeciderOpt = None,
    model: ModelOpt = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            "--slo",
            help="SLO to judge by (repeatable): length_aware, length_aware:FLOOR_MS:FACTOR, "
            "absolute:TTFT_MS (default: the simulator config's).",
        ),
    ] = None,
    quota_gib: Annotated[
        str | None,
        typer.Option(
            "--quota-gib",
            help="Comma-separated speculative quotas (GiB per node) to sweep for the "
            "replicating policies (default: the decider config's).",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", help="Worker processes (default: the CPU count, at most 8)."),
    ] = None,
    verdict: Annotated[
        bool,
        typer.Option(
            "--verdict",
            help="Judge the replicating policies against the goal (implies --capacity; also "
            "runs the best router's capacity load and the goal's low load); write "
            "verdict.json and verdict.png.",
        ),
    ] = False,
    goal: GoalOpt = None,
) -> None:
    """Compare policies across loads; write summary.json (a list) and plots.

    'all' runs every policy except the model policies (predictive_rule, predictive_lgbm,
    predictive_tcn) whose model was not given with --model."""
    scales = parse_floats(time_scale, "--time-scale")
    models = parse_models(model)
    names = default_policies(models) if policies == "all" else parse_names(policies)
    cfg = sim_config(config, nodes)
    decider = decider_for(decider_config)
    slos = [parse_slo(t, cfg.slo) for t in slo] if slo else None
    quotas = parse_floats(quota_gib, "--quota-gib", zero_ok=True) if quota_gib else None
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if goal is not None and not verdict:
        raise ValueError("--goal is read by --verdict only: add --verdict")
    unused_models(models, names)
    run_evaluation(
        trace, format, cfg, names, scales, capacity, out, skip_bad, decider, models, slos,
        quotas, jobs or default_jobs(), load_goal_config(goal) if verdict else None,
    )  # fmt: skip


def default_policies(models: dict[str, str]) -> list[str]:
    """Every registered policy, less the model policies without a model given."""
    from kvcast.simulator.model_scorer import is_model_policy

    return [
        n
        for n in policy_names()
        if not is_model_policy(n) or n.removeprefix("predictive_") in models
    ]
