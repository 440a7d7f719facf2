"""``kvcast trace``: trace tools (``synth``: a longer trace with a real one's statistics)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvcast.cli.common import console, open_trace, progress_bar, user_errors

trace_app = typer.Typer(
    help="Trace tools: synthesise a longer trace from a real one.",
    no_args_is_help=True,
    add_completion=False,
)


@trace_app.command("synth")
@user_errors
def synth_cmd(
    trace: Annotated[str, typer.Option("--trace", help="Source trace file, or bundled:NAME.")],
    scale: Annotated[int, typer.Option("--scale", help="Copies: the result is N x as long.")] = 10,
    out: Annotated[
        Path, typer.Option("--out", help="Output Mooncake JSONL (.jsonl or .jsonl.gz).")
    ] = Path("kvcast-out/traces/synth.jsonl"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of the session placement.")] = 0,
    sessions: Annotated[
        bool,
        typer.Option("--sessions/--no-sessions", help="Write each request's session id too."),
    ] = False,
    format: Annotated[
        str, typer.Option("--format", help="Source format: auto, mooncake, azure, parquet.")
    ] = "auto",
) -> None:
    """Replay a trace's sessions SCALE times with fresh block ids (same arrivals, prefix
    sharing and session structure per copy) into a Mooncake JSONL trace."""
    from kvcast.features.traces.synthesize import synthesize, write_mooncake

    if scale < 1:
        raise ValueError(f"--scale must be a positive integer, got {scale}")
    src = open_trace(trace, format)
    with progress_bar(None, f"synthesise {scale}x"):
        df = synthesize(src.requests, scale, seed)
        path = write_mooncake(df, out, sessions=sessions)
    span_s = (df["arrival_ms"].max() - df["arrival_ms"].min()) / 1000.0
    console.print(
        f"{path}: {len(df):,} requests over {span_s:,.0f} s "
        f"({scale} x {len(src.requests):,} from {src.name})",
        highlight=False,
    )
