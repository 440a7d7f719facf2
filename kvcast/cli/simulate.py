"""``kvcast simulate``: replay a trace through the cluster simulator under one policy; the
options and checks ``kvcast evaluate`` shares (:mod:`kvcast.cli.evaluate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape

from kvcast.cli.common import (
    console,
    fresh_summary,
    open_trace,
    out_console,
    parse_floats,
    parse_models,
    plural,
    progress_bar,
    unused_models,
    user_errors,
    write_json,
)
from kvcast.cli.summary_table import rejection_notes, summary_table
from kvcast.config import with_options
from kvcast.features.traces import TRACE_FORMATS, Trace
from kvcast.output_paths import output_dir
from kvcast.predictor.decider_config import DeciderConfig, load_decider_config
from kvcast.simulator.config import SimConfig, load_sim_config
from kvcast.simulator.engine import simulate as run_simulation
from kvcast.simulator.policies import policy_names
from kvcast.simulator.replicating_policy import check_base_router
from kvcast.simulator.replication_policies import make_policy

TraceOpt = Annotated[str, typer.Option("--trace", help="Trace file, or bundled:NAME.")]
FormatOpt = Annotated[
    str, typer.Option("--format", help=f"auto or one of: {', '.join(TRACE_FORMATS)}.")
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="Simulator YAML (default: embedded defaults).")
]
NodesOpt = Annotated[int | None, typer.Option("--nodes", help="Override the node count.")]
SkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Count and skip malformed trace lines.")
]
DeciderOpt = Annotated[
    Path | None,
    typer.Option(
        "--decider-config", help="Decider YAML for oracle / predictive_* (default: embedded)."
    ),
]


ModelOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        help="ONNX_PATH or models:/NAME@ALIAS (the model's own kind picks its policy), or "
        "KIND=... for predictive_rule / predictive_lgbm / predictive_tcn (repeatable; "
        "default: models:/kvcast-KIND@champion in the local MLflow store).",
    ),
]


def sim_config(config: Path | None, nodes: int | None) -> SimConfig:
    cfg = load_sim_config(config)
    return with_options(cfg, nodes=nodes)


@user_errors
def simulate_cmd(
    trace: TraceOpt,
    policy: Annotated[str, typer.Option("--policy", help="Routing policy name.")],
    format: FormatOpt = "auto",
    config: ConfigOpt = None,
    nodes: NodesOpt = None,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="Compress arrivals by X (2 = twice the load).")
    ] = 1.0,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/simulate"
    ),
    skip_bad: SkipBadOpt = False,
    decider_config: DeciderOpt = None,
    model: ModelOpt = None,
    shadow_log: Annotated[
        Path | None,
        typer.Option(
            "--shadow-log",
            help="Shadow mode (replicating policies): decide on every tick, act on nothing, "
            "and write each decision to this Parquet file (the sidecar's decision log, read "
            "by kvcast shadow-eval).",
        ),
    ] = None,
) -> None:
    """Replay a trace under one routing policy; write summary.json and requests.parquet."""
    parse_floats(str(time_scale), "--time-scale")
    models = parse_models(model)
    cfg = sim_config(config, nodes)
    decider = decider_for(decider_config)
    output_dir(out)
    if shadow_log is not None:  # a file path: checked before any long work
        if shadow_log.is_dir():
            raise ValueError(f"--shadow-log: {shadow_log} is a directory; give a Parquet file")
        output_dir(shadow_log.parent, "--shadow-log")
    tr = open_trace(trace, format, skip_bad=skip_bad)
    note_spread(tr, cfg)
    if policy not in policy_names():
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(policy_names())}")
    unused_models(models, [policy])
    pol = make_policy(policy, cfg, decider, models)
    log, replicator = None, None
    if shadow_log is not None:
        log, replicator = shadow_logger(pol, shadow_log, cfg, tr)
    with progress_bar(len(tr), f"simulate {policy}") as update:
        res = run_simulation(
            tr, cfg, pol, time_scale=time_scale, progress=update, replicator=replicator
        )
    if log is not None:
        log.close()
        out_console.print(escape(f"shadow mode: {replicator.decisions} decisions in {log.path}"))
    summary = fresh_summary(out)
    res.requests.to_parquet(out / "requests.parquet", index=False)
    res.timeline.to_parquet(out / "timeline.parquet", index=False)
    write_json(summary, res.summary)
    out_console.print(summary_table([res.summary], f"{tr.name}: {plural(len(tr), 'request')}"))
    warn_rejections([res.summary])
    out_console.print(escape(f"wrote {out}/summary.json, requests.parquet, timeline.parquet"))


def note_spread(tr: Trace, cfg: SimConfig) -> None:
    """Say so when ``arrival_spread: auto`` finds the trace's timestamps quantised and will
    spread each timestamp's requests over the quantum (a trace with real bursts on a coarse
    clock has them spread out: ``off`` replays them as recorded)."""
    from kvcast.features.traces.dequantize import detect_quantum_ms

    if cfg.arrival_spread != "auto":
        return
    arrivals = tr.requests["arrival_ms"].to_numpy(dtype=float)
    quantum = detect_quantum_ms(arrivals)
    if quantum is not None:
        counts = np.unique(arrivals, return_counts=True)[1]
        shared = counts[counts > 1].sum() / len(arrivals)
        console.print(
            escape(f"note: {shared:.0%} of the requests share a timestamp with another: each "
                   f"timestamp's requests are spread over the {quantum:,.0f} ms grid step "
                   "(arrival_spread: auto; off replays them as recorded)"),
            highlight=False, soft_wrap=True,
        )  # fmt: skip


def warn_rejections(summaries: list[dict[str, Any]]) -> None:
    """A warning line (stderr) per run that rejected requests, beside the table."""
    for line in rejection_notes(summaries):
        console.print(escape(f"warning: {line}"), style="yellow", highlight=False, soft_wrap=True)


def shadow_logger(pol: object, path: Path, cfg: SimConfig, trace: Trace) -> tuple[Any, Any]:
    """A decision log at ``path`` and the shadow replicator that fills it."""
    from kvcast.serving.sidecar.decision_log import DecisionLog
    from kvcast.serving.sidecar.decisions import make_decision
    from kvcast.simulator.replicating_policy import ReplicatingPolicy
    from kvcast.simulator.shadow import ShadowReplicator

    if not isinstance(pol, ReplicatingPolicy):
        raise ValueError(
            f"--shadow-log: {getattr(pol, 'name', pol)!r} does not replicate; use oracle or "
            "a predictive_* policy"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    names = tuple(f"node{i}" for i in range(cfg.nodes))
    log = DecisionLog(path, names, rows_per_chunk=4096, flush_s=1e9)
    block_bytes = cfg.block_bytes(cfg.block_tokens or trace.block_size)

    def sink(now: float, tick: int, commands: list[Any], cands: Any, probs: Any) -> None:
        log.add([
            make_decision(
                cmd, ident=f"sim-{tick}-{i}", tick=tick, now_ms=now, mode="shadow",
                block_bytes=block_bytes, cands=cands, probs=probs, model=pol.name,
            )
            for i, cmd in enumerate(commands)
        ])  # fmt: skip

    return log, ShadowReplicator(pol, sink)


def decider_for(path: Path | None) -> DeciderConfig:
    """The decider config at ``path`` (None: the embedded one), its base router checked."""
    decider = load_decider_config(path)
    check_base_router(decider, str(path or "the embedded decider config"))
    return decider
