"""``kvcast trace``: trace tools (``synth``: a longer trace with a real one's statistics;
``agent``: a synthetic agent workload; ``reuse``: how predictable its prefix reuse is)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kvcast.cli.common import (
    console,
    no_repeats,
    open_trace,
    png_path,
    progress_bar,
    user_errors,
    write_json,
)
from kvcast.output_paths import output_file

trace_app = typer.Typer(
    help="Trace tools: synthesise a longer trace from a real one or an agent workload; "
    "measure a trace's reuse.",
    no_args_is_help=True,
    add_completion=False,
)


SkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Count and skip malformed trace lines.")
]


def jsonl_path(out: Path) -> Path:
    """``out`` if its name says Mooncake JSONL (what ``trace synth`` and ``trace agent``
    write), else a ValueError: a ``.parquet`` name would hold JSONL no loader reads as such."""
    if not out.name.endswith((".jsonl", ".jsonl.gz")):
        raise ValueError(f"--out: {out} must end in .jsonl or .jsonl.gz (Mooncake JSONL is "
                         "written)")  # fmt: skip
    return out


@trace_app.command("synth")
@user_errors
def synth_cmd(
    trace: Annotated[str, typer.Option("--trace", help="Source trace file, or bundled:NAME.")],
    scale: Annotated[int, typer.Option("--scale", help="Copies: the result is N x as long.")] = 10,
    out: Annotated[
        Path, typer.Option("--out", help="Output Mooncake JSONL (.jsonl or .jsonl.gz).")
    ] = Path("kvcast-out/traces/synth.jsonl"),
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the session placement.")] = 0,
    sessions: Annotated[
        bool,
        typer.Option("--sessions/--no-sessions", help="Write each request's session id too."),
    ] = False,
    format: Annotated[
        str, typer.Option("--format", help="Source format: auto, mooncake, azure, parquet.")
    ] = "auto",
    skip_bad: SkipBadOpt = False,
) -> None:
    """Replay a trace's sessions SCALE times with fresh block ids into a Mooncake JSONL trace.

    Each copy keeps the source's arrivals, prefix sharing and session structure."""
    from kvcast.features.traces.synthesize import synthesize, write_mooncake

    if scale < 1:
        raise ValueError(f"--scale must be a positive integer, got {scale}")
    output_file(jsonl_path(out), "--out", [("--trace", Path(trace))])
    src = open_trace(trace, format, skip_bad=skip_bad)
    with progress_bar(None, f"synthesise {scale}x"):
        df = synthesize(src.requests, scale, seed)
        path = write_mooncake(df, out, sessions=sessions)
    span_s = (df["arrival_ms"].max() - df["arrival_ms"].min()) / 1000.0
    console.print(
        escape(f"{path}: {len(df):,} requests over {span_s:,.0f} s "
               f"({scale} x {len(src.requests):,} from {src.name})"),
        highlight=False,
    )  # fmt: skip


@trace_app.command("agent")
@user_errors
def agent_cmd(
    out: Annotated[
        Path, typer.Option("--out", help="Output Mooncake JSONL (.jsonl or .jsonl.gz).")
    ] = Path("kvcast-out/traces/agent.jsonl"),
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Workload YAML (default: the values of configs/traces/agent.yaml)."
        ),
    ] = None,
    duration_s: Annotated[
        float | None, typer.Option("--duration-s", help="Override: seconds of arrivals.")
    ] = None,
    tasks_per_s: Annotated[
        float | None, typer.Option("--tasks-per-s", help="Override: new agent tasks per second.")
    ] = None,
    tool_s: Annotated[
        float | None, typer.Option("--tool-s", help="Override: median tool latency (s).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="Override: the seed.")] = None,
    sessions: Annotated[
        bool,
        typer.Option("--sessions/--no-sessions", help="Write each request's task id too."),
    ] = False,
) -> None:
    """Write a synthetic agent workload (Mooncake JSONL).

    Tasks call the model step after step around an app's shared prompt, each next call after
    the tool's run time (see kvcast.features.traces.agent_trace)."""
    from kvcast.config import with_options
    from kvcast.features.traces.agent_config import load_agent_config
    from kvcast.features.traces.agent_trace import agent_trace
    from kvcast.features.traces.synthesize import write_mooncake

    output_file(jsonl_path(out), "--out", [("--config", config)])
    cfg = load_agent_config(config)
    if tool_s is not None:
        tool = cfg.tool_s.model_dump() | {"median": tool_s}
        tool["low"], tool["high"] = min(tool["low"], tool_s), max(tool["high"], tool_s)
        cfg = with_options(cfg, tool_s=tool)
    cfg = with_options(cfg, duration_s=duration_s, tasks_per_s=tasks_per_s, seed=seed)
    with progress_bar(None, "agent tasks"):
        df = agent_trace(cfg)
        if df.empty:  # a file of no requests is not a trace: every loader refuses it
            raise ValueError(
                f"no request arrives within {cfg.duration_s:g} s at {cfg.tasks_per_s:g} "
                "tasks/s; raise --duration-s or --tasks-per-s"
            )
        path = write_mooncake(df, out, sessions=sessions)
    console.print(
        escape(f"{path}: {len(df):,} requests from {df['session'].nunique():,} tasks over "
               f"{cfg.duration_s:,.0f} s (seed {cfg.seed})"),
        highlight=False,
    )  # fmt: skip


@trace_app.command("reuse")
@user_errors
def reuse_cmd(
    trace: Annotated[str, typer.Option("--trace", help="Trace file, or bundled:NAME.")],
    window_s: Annotated[
        float, typer.Option("--window-s", help="Prediction window: next use within this.")
    ] = 30.0,
    idle_s: Annotated[
        str, typer.Option("--idle-s", help="Comma-separated idle ages (s) to report.")
    ] = "0,15,30,60,120,240,480",
    min_blocks: Annotated[
        int, typer.Option("--min-blocks", help="Shared prefix depth that counts as a use.")
    ] = 2,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the figures as JSON here.")
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Also plot the hazard (PNG).")] = None,
    format: Annotated[
        str, typer.Option("--format", help="Trace format: auto, mooncake, azure, parquet.")
    ] = "auto",
    skip_bad: SkipBadOpt = False,
) -> None:
    """How predictable the trace's prefix reuse is: P(used again within the window | idle X s).

    Among requests whose chain has been idle for X s, the share used again within the window
    (the precision of the best rule that knows only idle time). Compare it with the P the
    decider needs to act."""
    from rich.table import Table

    from kvcast.features.traces.reuse import plot_hazard, reuse_hazard

    if not 0 < window_s < math.inf:
        raise ValueError(f"--window-s must be a positive number of seconds, got {window_s:g}")
    try:
        ages = [float(x) * 1e3 for x in idle_s.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--idle-s must be comma-separated seconds, got {idle_s!r}") from None
    if not ages or not all(0 <= a < math.inf for a in ages):
        raise ValueError(f"--idle-s must be finite seconds >= 0, got {idle_s!r}")
    no_repeats([a / 1e3 for a in ages], "--idle-s")
    if not window_s * 1e3 < math.inf:
        raise ValueError(f"--window-s must be a finite number of seconds, got {window_s:g}")
    if min_blocks < 1:
        raise ValueError(f"--min-blocks must be at least 1, got {min_blocks}")
    plot = png_path(plot)
    for flag, path in (("--json", json_out), ("--plot", plot)):
        if path is not None:
            output_file(path, flag, [("--trace", Path(trace))])
    src = open_trace(trace, format, skip_bad=skip_bad)
    with progress_bar(None, "next uses"):
        h = reuse_hazard(src.requests, window_ms=window_s * 1e3, idle_ms=ages,
                         min_blocks=min_blocks)  # fmt: skip
    console.print(escape(f"{src.name}: P(next use within {window_s:g} s | idle X s)"),
                  highlight=False)  # fmt: skip
    table = Table()
    for col in ("idle s", "waiting", "used in window", "P"):
        table.add_column(col, justify="right")
    for r in h.rows:
        p = f"{r.p:.3f}" if math.isfinite(r.p) else "-"  # no request waited that long
        table.add_row(f"{r.idle_ms / 1e3:g}", f"{r.waiting:,}", f"{r.followed:,}", p)
    console.print(table)
    ever = f"{h.ever_followed:.1%}" if math.isfinite(h.ever_followed) else "-"
    gap = h.gap_quantiles_ms.get("p50", math.nan) / 1e3
    console.print(
        escape(f"{h.requests:,} requests; {ever} used again within {h.horizon_ms / 1e3:g} s; "
               f"median gap to the next use " + (f"{gap:.1f} s" if math.isfinite(gap) else "-")),
        highlight=False,
    )  # fmt: skip
    if json_out is not None:
        write_json(json_out, {"trace": src.name, **h.to_dict()})  # strict: NaN as null
    if plot is not None:
        console.print(escape(f"plot: {plot_hazard({src.name: h}, str(plot))}"), highlight=False)
