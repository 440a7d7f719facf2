"""``kvcast features``: replay a trace and write the training table (features + labels)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from kvcast.cli.common import (
    check_time_scale,
    console,
    fresh_summary,
    open_trace,
    out_console,
    progress_bar,
    user_errors,
    write_json,
)
from kvcast.cli.simulate import (
    ConfigOpt,
    FormatOpt,
    NodesOpt,
    SkipBadOpt,
    TraceOpt,
    sim_config,
)
from kvcast.output_paths import output_dir
from kvcast.simulator.policies import policy_names
from kvcast.simulator.recording import feature_config_for, record_events

if TYPE_CHECKING:
    from kvcast.features.config import FeatureConfig
    from kvcast.features.spec import FeatureSpec


def _trace_hash(spec: str) -> str:
    from kvcast.data import trace_file
    from kvcast.features.dataset import file_hash

    return file_hash(trace_file(spec)[0])


def _dask_features(
    events: list, fcfg: FeatureConfig, out: Path, scheduler: str, workers: int, window_ms: float
) -> tuple[list[str], dict]:
    """Write ``out/parts/part-*.parquet`` on the cluster; the parts' paths and the summary."""
    from kvcast.features.dask_client import dask_client
    from kvcast.features.offline.dask_engine import write_feature_parts

    with dask_client(scheduler, workers) as client:
        parts, summary = write_feature_parts(
            events, out / "parts", None, fcfg, client=client, window_ms=window_ms
        )
    return [p["path"] for p in parts], summary


def _rates(summary: dict) -> str:
    """The positive rate; with negatives sampled, the rows' and every candidate's (the
    weighted one: the base rate the metrics and the decider see)."""
    rate, weighted = summary["positives_rate"], summary["positives_rate_weighted"]
    if weighted is None or abs(weighted - rate) < 5e-4:
        return f"{rate:.1%}"
    return f"{rate:.1%} of the rows, {weighted:.1%} of all candidates: negatives sampled"


def _remove_parts(out: Path) -> None:
    """An earlier run's Dask parts (``out/parts/part-*.parquet``): a new run's would sit
    beside them, and reading the folder would mix the two runs."""
    for part in (out / "parts").glob("part-*.parquet"):
        part.unlink()


def _join(
    parts: list[str], out: Path, spec: FeatureSpec, trace_hash: str, fcfg: FeatureConfig, bad: dict
) -> Path:
    from kvcast.features.offline.parts_io import join_parts

    return join_parts(parts, out, spec, trace_hash, fcfg.digest(), bad, fcfg)


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
    engine: Annotated[
        str, typer.Option("--engine", help="pandas (one process) or dask (one task per window).")
    ] = "pandas",
    scheduler: Annotated[
        str,
        typer.Option(
            "--scheduler", help="Dask engine: scheduler address (tcp://host:8786) or local."
        ),
    ] = "local",
    workers: Annotated[
        int, typer.Option("--workers", help="Dask engine, local scheduler: worker processes.")
    ] = 2,
    window_ms: Annotated[
        float, typer.Option("--window-ms", help="Dask engine: ticks per task, in ms.")
    ] = 1_800_000.0,
) -> None:
    """Replay a trace through the simulator and write features.parquet with its spec."""
    from kvcast.features import build_feature_dataset, build_spec, summarise
    from kvcast.features.config import load_feature_config
    from kvcast.features.dataset import write_feature_dataset

    if policy not in policy_names():
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(policy_names())}")
    check_time_scale(time_scale)
    if engine not in ("pandas", "dask"):
        raise ValueError(f"unknown --engine {engine!r}; valid: pandas, dask")
    if engine == "dask":
        from kvcast.features.dask_client import check_scheduler

        if not (workers >= 1 and window_ms > 0):
            raise ValueError(
                f"--workers must be >= 1 and --window-ms > 0, got {workers}, {window_ms}"
            )
        check_scheduler(scheduler)  # a typo is told before the replay, not after it
    sim = sim_config(config, nodes)
    output_dir(out)
    tr = open_trace(trace, format, skip_bad=skip_bad)
    fcfg = feature_config_for(sim, tr, load_feature_config(features_config))
    with progress_bar(len(tr), f"replay {policy}") as update:
        events = record_events(tr, sim, policy, time_scale=time_scale, progress=update)
    spec = build_spec(fcfg)
    summary_path = fresh_summary(out)  # written last
    _remove_parts(out)
    parts: list[str] = []
    if engine == "dask":
        with progress_bar(None, f"features on dask ({scheduler})"):
            parts, summary = _dask_features(events, fcfg, out, scheduler, workers, window_ms)
        if parts:
            path = _join(parts, out, spec, _trace_hash(trace), fcfg, summary["bad_input"])
    if not parts:  # pandas, or a trace without ticks: the empty table is the same either way
        with progress_bar(None, "features"):
            df = build_feature_dataset(events, fcfg.ticks, fcfg)
        path = write_feature_dataset(df, out, spec, _trace_hash(trace), fcfg.digest(), fcfg)
        summary = summarise(df, spec)
    write_json(summary_path, summary)
    if not summary["rows"]:
        span_s = (tr.requests["arrival_ms"].max() - tr.requests["arrival_ms"].min()) / 1e3
        console.print(
            f"[yellow]warning:[/] {escape(str(path))}: no rows. A tick is labelled only when "
            f"its label window (t, t + {fcfg.labels.horizon_ms / 1e3:g} s] ends before the "
            f"last request (labels.drop_censored), and the trace's arrivals span "
            f"{span_s:.3g} s as loaded (divided by --time-scale when played): use a longer "
            "trace"
        )
        return
    out_console.print(
        escape(f"{path}: {summary['rows']:,} rows, {summary['positives']:,} positives "
               f"({_rates(summary)}), {len(spec)} features, spec {spec.digest}")
    )  # fmt: skip
    table = Table("feature", "unit", "null rate", title="features", title_justify="left")
    for f in spec.features:
        table.add_row(f.name, f.unit, f"{summary['null_rate'][f.name]:.1%}")
    out_console.print(table)
    bad = {k: v for k, v in summary["bad_input"].items() if v}
    out_console.print(f"bad input: {bad or 'none'}")
