"""``kvcast features``: replay a trace and write the training table (features + labels)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kvcast.cli.common import open_trace, progress_bar, user_errors, write_json
from kvcast.cli.simulate import (
    ConfigOpt,
    FormatOpt,
    NodesOpt,
    SkipBadOpt,
    TraceOpt,
    out_console,
    sim_config,
)
from kvcast.simulator.policies import policy_names
from kvcast.simulator.recording import feature_config_for, record_events


def _trace_hash(spec: str) -> str:
    from kvcast.features.dataset import file_hash

    if spec.startswith("bundled:"):
        from kvcast.data import bundled_trace_path

        return file_hash(bundled_trace_path(spec.removeprefix("bundled:")))
    return file_hash(spec)


@user_errors
def features_cmd(
    trace: TraceOpt,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/features"
    ),
    policy: Annotated[
        str, typer.Option("--policy", help="Router used for the replay that makes the events.")
    ] = "dynamo_kv",
    format: FormatOpt = "auto",
    config: ConfigOpt = None,
    features_config: Annotated[
        Path | None,
        typer.Option("--features-config", help="Feature/label YAML (default: embedded)."),
    ] = None,
    nodes: NodesOpt = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Load multiplier.")] = 1.0,
    skip_bad: SkipBadOpt = False,
) -> None:
    """Replay a trace through the simulator and write features.parquet with its spec."""
    from kvcast.features import build_feature_dataset, build_spec, summarise
    from kvcast.features.config import load_feature_config
    from kvcast.features.dataset import write_feature_dataset

    if policy not in policy_names():
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(policy_names())}")
    if not time_scale > 0:
        raise ValueError(f"--time-scale must be a positive number, got {time_scale}")
    sim = sim_config(config, nodes)
    tr = open_trace(trace, format, skip_bad=skip_bad)
    fcfg = feature_config_for(sim, tr, load_feature_config(features_config))
    with progress_bar(len(tr), f"replay {policy}") as update:
        events = record_events(tr, sim, policy, time_scale=time_scale, progress=update)
    with progress_bar(None, "features"):
        df = build_feature_dataset(events, fcfg.ticks, fcfg)
    spec = build_spec(fcfg)
    path = write_feature_dataset(df, out, spec, _trace_hash(trace), fcfg.digest())
    summary = summarise(df, spec)
    write_json(out / "summary.json", summary)
    out_console.print(
        f"{path}: {summary['rows']:,} rows, {summary['positives']:,} positives "
        f"({summary['positives_rate']:.1%}), {len(spec)} features, spec {spec.digest}"
    )
    table = Table("feature", "unit", "null rate", title="features", title_justify="left")
    for f in spec.features:
        table.add_row(f.name, f.unit, f"{summary['null_rate'][f.name]:.1%}")
    out_console.print(table)
    bad = {k: v for k, v in summary["bad_input"].items() if v}
    out_console.print(f"bad input: {bad or 'none'}")
