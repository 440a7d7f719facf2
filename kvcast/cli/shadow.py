"""``kvcast shadow-eval``: judge a shadow run's decision log against the trace that arrived."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvcast.cli.common import (
    check_time_scale,
    console,
    open_trace,
    plural,
    png_path,
    progress_bar,
    user_errors,
    write_json,
)
from kvcast.cli.simulate import FormatOpt, SkipBadOpt, TraceOpt
from kvcast.output_paths import output_file

out_console = Console(width=None if sys.stdout.isatty() else 120, emoji=False)


def _num(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.4g}{unit}" if abs(x) < 1e4 else f"{x:,.0f}{unit}"
    return f"{x:,}{unit}"


def shadow_table(s: dict[str, Any], title: str) -> Table:
    t = Table("measure", "value", title=title, title_justify="left")
    kinds = ", ".join(f"{k} {v}" for k, v in s["by_kind"].items())
    rate = None if s["hit_rate"] is None else f"{s['hit_rate']:.1%}"
    covered = s["lead_covers_transfer_fraction"]
    rows = [
        ("decisions judged", f"{s['decisions']:,} ({kinds}; {s['evictions']} evictions set aside)"),
        ("hits (hit rate), request on any node", f"{s['hits']:,} ({rate or '-'})"),
        *_routed_rows(s),
        ("misses censored by the trace's end", _num(s["censored"])),
        ("mean / p50 lead time", f"{_num(s['mean_lead_time_ms'], ' ms')} / "
                                 f"{_num(s['p50_lead_time_ms'], ' ms')}"),
        ("mean transfer time of hits", f"{_num(s['mean_transfer_ms_of_hits'], ' ms')} "
                                       f"({s['transfer_ms_source']})"),
        ("transfer time hidden", _num(s["transfer_hidden_ms"], " ms")),
        ("bytes decided", _num(s["bytes_decided"])),
        ("bytes wasted, any node", f"{_num(s['bytes_wasted'])} ({_num(s['wasted_fraction'])})"),
        ("bytes wasted unless routed to the target", _off_target(s)),
        ("TTFT saved by hits", _num(s["ttft_saved_ms"], " ms")),
        ("TTFT saved, decider's expectation", _expected(s)),
        ("hits whose lead >= transfer", "-" if covered is None else f"{covered:.1%}"),
    ]  # fmt: skip
    for name, value in rows:
        t.add_row(name, value)
    return t


NO_ROUTES = "- (needs --routes)"


def _routed_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the hits' requests went, and the hit rate when only a request routed to the
    copy's target counts (what an active copy needs)."""
    if s["hits_routed_to_target"] is None:
        return [("hits routed to target / source / elsewhere", NO_ROUTES),
                ("hit rate, request routed to the target", NO_ROUTES)]  # fmt: skip
    keys = ("hits_routed_to_target", "hits_routed_to_source", "hits_routed_elsewhere")
    counts = " / ".join(f"{s[key]:,}" for key in keys)
    to_target, to_source = s["routed_to_target_fraction"], s["routed_to_source_fraction"]
    shares = "" if to_target is None else f" ({to_target:.1%} / {to_source:.1%} of hits)"
    on_target = s["hit_rate_on_target"]
    return [
        ("hits routed to target / source / elsewhere", counts + shares),
        ("hit rate, request routed to the target", "-" if on_target is None else
         f"{s['hits_routed_to_target']:,} ({on_target:.1%})"),
    ]  # fmt: skip


def _off_target(s: dict[str, Any]) -> str:
    if s["bytes_wasted_off_target"] is None:
        return NO_ROUTES
    return f"{_num(s['bytes_wasted_off_target'])} ({_num(s['wasted_fraction_off_target'])})"


def _expected(s: dict[str, Any]) -> str:
    unknown = s.get("decisions_without_p_hit", 0)
    if not unknown:
        return _num(s["ttft_saved_expected_ms"], " ms")
    return f"- ({unknown:,} decisions logged without a P(hit))"


@user_errors
def shadow_eval_cmd(
    decisions: Annotated[
        Path,
        typer.Option(
            "--decisions",
            help="The decision log (Parquet) of a shadow run, or a directory of its runs' logs.",
        ),
    ],
    trace: TraceOpt,
    format: FormatOpt = "auto",
    skip_bad: SkipBadOpt = False,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="The load the run replayed the trace at.")
    ] = 1.0,
    load_scaling: Annotated[
        str,
        typer.Option(
            "--load-scaling",
            help="How the run's time-scale raised the load: arrivals or sessions (the "
            "simulator config's load_scaling).",
        ),
    ] = "arrivals",
    spread: Annotated[
        str,
        typer.Option(
            "--spread",
            help="De-quantise arrivals like the simulator: auto, off or a quantum in ms.",
        ),
    ] = "auto",
    seed: Annotated[
        int,
        typer.Option("--seed", min=0, help="Seed of the de-quantisation and of the load scaling."),
    ] = 0,
    clock_offset_ms: Annotated[
        float,
        typer.Option("--clock-offset-ms", help="The log's clock (ms) at trace time 0."),
    ] = 0.0,
    decider_config: Annotated[
        Path | None,
        typer.Option("--decider-config", help="Decider YAML that made the log (transfer weights)."),
    ] = None,
    min_covered: Annotated[
        float,
        typer.Option("--min-covered", help="Go-live: share of hits whose lead covers transfer."),
    ] = 0.9,
    min_hits: Annotated[
        int, typer.Option("--min-hits", help="Go-live: hits needed to judge the rule at all.")
    ] = 20,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the summary here.")] = None,
    routes: Annotated[
        Path | None,
        typer.Option(
            "--routes",
            help="Where each request was routed (Parquet: request_id, node; simulate's "
            "requests.parquet of the shadow run, or the sidecar's routes log beside its "
            "decision log: decisions.routes.parquet or the directory): adds the hits whose "
            "request went to the copy's target or source node, and the waste when only the "
            "target counts.",
        ),
    ] = None,
    outcomes: Annotated[
        Path | None,
        typer.Option("--outcomes", help="Also write each decision's outcome here (Parquet)."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Also plot lead vs transfer time and the calibration here (PNG)."
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit with status 1 when the go-live rule fails.")
    ] = False,
) -> None:
    """Replay a decision log against the trace: hit rate, lead time, waste, the go-live rule.

    Also the transfer time the decisions would have hidden and the TTFT they would have saved;
    the go-live rule: the lead time covers the transfer time. A hit counts a request on any
    node; with --routes, also the hits whose request went to the copy's target node (what an
    active copy needs) or its source, and the bytes wasted when only the target counts."""
    from kvcast.features.traces.dequantize import spread_quantized
    from kvcast.features.traces.load_scaling import scale_load
    from kvcast.predictor.decider_config import load_decider_config
    from kvcast.predictor.shadow_eval import (
        RoutesError,
        ShadowConfig,
        evaluate_shadow,
        read_decisions,
        read_routes,
    )

    check_time_scale(time_scale)
    if not math.isfinite(clock_offset_ms):
        raise ValueError(f"--clock-offset-ms must be a finite number, got {clock_offset_ms}")
    if not 0 <= min_covered <= 1:
        raise ValueError(f"--min-covered must be within [0, 1], got {min_covered}")
    if min_hits < 1:
        raise ValueError(f"--min-hits must be >= 1, got {min_hits}")
    quantum = _spread(spread)
    costs = load_decider_config(decider_config).costs
    given = [("--decisions", decisions), ("--routes", routes), ("--trace", Path(trace)),
             ("--decider-config", decider_config)]  # fmt: skip
    if plot is not None:
        plot = png_path(plot)
    for flag, path in (("--out", out), ("--outcomes", outcomes), ("--plot", plot)):
        if path is not None:  # before the replay: never after minutes of work
            output_file(path, flag, given)

    def warn(msg: str) -> None:
        console.print(f"[yellow]warning:[/] {escape(msg)}")

    log = read_decisions(decisions, warn=warn)  # a part cut short by a killed sidecar is skipped
    routed = None if routes is None else read_routes(routes, warn=warn)
    beside = _routes_beside(decisions) if routes is None else None
    if beside is not None:
        console.print(
            f"note: a routes log is beside the decisions: add --routes {escape(str(beside))} "
            "to see where each hit's request went",
            soft_wrap=True,  # a path is not cut
        )
    tr = open_trace(trace, format, skip_bad=skip_bad)
    if quantum != 0.0:
        tr = spread_quantized(tr, quantum, seed=seed)
    tr = scale_load(tr, time_scale, load_scaling, seed)  # type: ignore[arg-type]  # checked there
    cfg = ShadowConfig(clock_offset_ms, min_covered, min_hits, costs.transfer_weight,
                       costs.promote_transfer_weight)  # fmt: skip
    with progress_bar(None, "shadow-eval") as update:
        try:
            res = evaluate_shadow(log, tr, cfg, progress=update, routes=routed)
        except RoutesError as err:  # the routes do not cover the hits' requests
            raise ValueError(f"{routes}: {err}") from None
        except ValueError as err:
            raise ValueError(f"{decisions}: {err}") from None
    summary = {"decisions_file": str(decisions), "trace": tr.name, "time_scale": time_scale,
               "routes_file": None if routes is None else str(routes), **res.summary}  # fmt: skip
    written = []
    if out is not None:
        written.append(write_json(out, summary))
    if outcomes is not None:
        res.outcomes.to_parquet(outcomes, index=False)
        written.append(outcomes)
    if plot is not None:
        from kvcast.predictor.shadow_plots import plot_shadow

        title = f"shadow-eval: {decisions.name} vs {tr.name} (x{time_scale:g})"
        written.append(plot_shadow(res.outcomes, plot, min_covered, title, min_hits))
    passed = summary["go_live"]["pass"]
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
    else:
        out_console.print(shadow_table(summary, f"shadow-eval: {decisions.name} vs {tr.name}"))
        covered = summary["lead_covers_transfer_fraction"]
        share = "no hits" if covered is None else f"{covered:.1%} of hits"
        verdict = "PASS" if passed else "FAIL"
        hits = summary["hits"]
        few = f"; {plural(hits, 'hit')}, {min_hits} needed to judge" if hits < min_hits else ""
        out_console.print(
            f"go-live {verdict}: lead time >= transfer time for {share} (needs "
            f"{min_covered:.0%}){few}",
            highlight=False,
        )
        for path in written:
            out_console.print(f"wrote {path}", highlight=False)
    if check and not passed:
        raise typer.Exit(1)


def _spread(text: str) -> float | None:
    """auto -> None (detect), off -> 0, else a positive quantum in ms."""
    if text == "auto":
        return None
    if text == "off":
        return 0.0
    try:
        q = float(text)
    except ValueError:
        raise ValueError(f"--spread: {text!r} is not auto, off or a number of ms") from None
    if not 0 < q < math.inf:
        raise ValueError(f"--spread: {text!r} must be a positive, finite number of ms")
    return q


def _routes_beside(decisions: Path) -> Path | None:
    """The sidecar's routes log written beside ``decisions`` (the folder or its first part),
    if there is one: what ``--routes`` would take."""
    from kvcast.predictor.decision_log_reader import routes_logs
    from kvcast.serving.sidecar.routes_log import routes_path

    if decisions.is_dir():
        return decisions if routes_logs(decisions) else None
    path = routes_path(decisions)
    return path if path.exists() else None
