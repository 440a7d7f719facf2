"""``kvcast cluster``: a sidecar and N agents on loopback (``up``), and a trace played against
them as the router and the engines (``replay``)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from kvcast.cli.common import (
    console,
    fail,
    open_trace,
    parse_names,
    progress_bar,
    user_errors,
)
from kvcast.cli.common import write_json as write_json_file
from kvcast.cli.token_options import (
    IngestTokenEnv,
    TokenEnv,
    check_cluster_options,
    check_token_options,
)
from kvcast.output_paths import output_file
from kvcast.serving.http.token_env import INGEST_TOKEN_ENV, SHARED_TOKEN_ENV

cluster_app = typer.Typer(
    help="A local cluster on loopback: sidecar + agents, and trace replay against it.",
    no_args_is_help=True, add_completion=False,
)  # fmt: skip
T = TypeVar("T")
out = Console(highlight=False, width=140, emoji=False)
MODEL_HELP = "ONNX path or models:/name@alias (default: the trained recency model)."
ENGINES_HELP = "Engine PUB endpoints to bind, node order (default: KV events over HTTP)."
PLAYED_HELP = (
    "Write the requests as played (a Parquet trace, arrivals in ms after the printed unix ms "
    "of trace time 0) for `kvcast shadow-eval --trace FILE --spread off --clock-offset-ms T0`."
)
TLS_HELP = (
    "Mutual TLS between every process: make a cluster CA and a certificate + key per process "
    "(and one for `cluster replay`) in WORKDIR/tls/; the sidecar and the agents then serve "
    "https:// only and refuse clients without a certificate of that CA."
)


def _size(flag: str, text: str) -> int:
    from kvcast.cli.serve import flag_size

    return flag_size(flag, text)


def _layout_table(layout: Any) -> Table:
    table = Table(title=f"kvcast local cluster ({layout.mode}, model {layout.model})")
    for col in ("service", "HTTP", "transfer / engine KV events", "pid"):
        table.add_column(col)
    table.add_row("sidecar", layout.sidecar, "", str(layout.pids.get("sidecar", "")))
    for n in layout.nodes:
        table.add_row(f"agent {n.name}", n.agent, f"{n.transfer}  {n.engine or ''}",
                      str(layout.pids.get(n.name, "")))  # fmt: skip
    if layout.tls is not None:
        table.caption = f"mutual TLS, CA {layout.tls.ca}"
    return table


@cluster_app.command("up")
@user_errors
def up_cmd(
    ctx: typer.Context,
    agents: Annotated[int, typer.Option("--agents", min=1, max=64, help="Agents (nodes).")] = 3,
    token_env: TokenEnv = SHARED_TOKEN_ENV,
    ingest_token_env: IngestTokenEnv = INGEST_TOKEN_ENV,
    mode: Annotated[str, typer.Option("--mode", help="shadow|active.")] = "shadow",
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    workdir: Annotated[
        Path, typer.Option("--workdir", help="Configs, logs, decision log, cluster.json.")
    ] = Path("kvcast-out/cluster"),
    capacity: Annotated[str, typer.Option("--capacity", help="Bytes per agent.")] = "512MiB",
    speculative_quota: Annotated[
        str, typer.Option("--speculative-quota", help="Speculative bytes per agent.")
    ] = "128MiB",
    block_bytes: Annotated[
        str, typer.Option("--block-bytes", help="KV bytes of a block, as the sidecar prices it.")
    ] = "64KiB",
    tick_ms: Annotated[float, typer.Option("--tick-ms", min=1.0, help="Decision tick.")] = 250.0,
    tls: Annotated[bool, typer.Option("--tls", help=TLS_HELP)] = False,
) -> None:
    """Start a sidecar and N agents on 127.0.0.1 as separate processes; Ctrl-C stops them.

    Each process reads the shared token from the --token-env variable and the ingest token
    (reports only: arrivals, KV events, engine stats) from the --ingest-token-env variable,
    when they are set; cluster.json names both variables, never a token, for cluster replay.
    """
    from kvcast.serving.cluster.model_choice import choose_model
    from kvcast.serving.cluster.supervisor import (
        ClusterSpec,
        LocalCluster,
        ServiceFailed,
        StartAborted,
    )

    check_token_options(ctx)
    spec = ClusterSpec(
        model=choose_model(model), agents=agents, workdir=workdir, mode=mode,
        token_env=token_env, ingest_token_env=ingest_token_env,
        capacity_bytes=_size("--capacity", capacity),
        speculative_quota_bytes=_size("--speculative-quota", speculative_quota),
        block_bytes=_size("--block-bytes", block_bytes), tick_ms=tick_ms, tls=tls,
    )  # fmt: skip
    stop = threading.Event()  # set by SIGINT / SIGTERM / SIGHUP, whenever they come
    cluster = LocalCluster(spec, abort=stop)

    def stop_requested(signum: int, frame: object) -> None:
        stop.set()

    # Ctrl-C, a kill, or the terminal closing (SIGHUP): every one stops the cluster cleanly
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, stop_requested) for s in handled}
    try:
        try:
            console.print(f"starting {agents} agents and a sidecar in {cluster.workdir} ...")
            layout = cluster.start()
        except ServiceFailed as err:
            raise fail(str(err)) from None
        except StartAborted:
            console.print("interrupted while starting; stopped")
            raise typer.Exit(0) from None
        out.print(_layout_table(layout))
        ca = "" if layout.tls is None else f"tls_ca={layout.tls.ca} "
        print(f"cluster ready: sidecar={layout.sidecar} agents={agents} "
              f"workdir={cluster.workdir} {ca}(Ctrl-C stops it)", flush=True)  # fmt: skip
        while not stop.wait(0.5):
            if (dead := cluster.exited()) is not None:
                cluster.stop()
                raise fail(str(dead.failure(f"exited with status {dead.returncode()}")))
        console.print("stopping ...")
        codes = cluster.stop()
    finally:
        cluster.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    bad = {name: code for name, code in codes.items() if code != 0}
    if bad:
        raise fail(f"unclean stop (exit statuses): {bad}; logs in {cluster.workdir / 'logs'}")
    print(f"cluster stopped: {len(codes)} processes exited 0", flush=True)


def _summary_table(summary: dict[str, Any]) -> Table:
    r, s = summary["replay"], summary["sidecar"]
    table = Table(title="replay summary")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("requests routed / posted", f"{r['requests']} / {r['arrivals_posted']}"),
        ("blocks stored (PUT) / evicted", f"{r['blocks_put']} / {r['blocks_evicted']}"),
        ("bytes stored", f"{r['bytes_put']:,}"),
        ("KV events published", f"{r['events_published']} in {r['event_batches']} batches"),
        ("sidecar events in", ", ".join(f"{k} {v}" for k, v in s["events_in"].items())),
        ("sidecar decisions", ", ".join(f"{k} {v}" for k, v in s["decisions"].items()) or "0"),
        ("replications issued / done / failed",
         f"{s['replications_issued']} / {s['replications_done']} / {s['replications_failed']}"),
        ("bytes replicated (sidecar / agents pulled)",
         f"{s['replicated_bytes']:,} / {summary['agents_bytes_pulled']:,}"),
        ("replica hit rate", f"{s['replica_hit_rate']:.2f}"),
        ("failed: block PUTs / arrivals posted / requests unfinished",
         f"{r['put_failures']} / {r['arrival_failures']} / {r['requests_unfinished']}"),
    ]  # fmt: skip
    for a in summary["agents"]:
        rows.append((f"{a['node']}: pulled / peak speculative / quota",
                     f"{a['bytes_pulled']:,} / {a['peak_speculative_bytes']:,} / "
                     f"{a['speculative_quota_bytes']:,}"))  # fmt: skip
    for what, value in rows:
        table.add_row(what, value)
    return table


@cluster_app.command("replay")
@user_errors
def replay_cmd(
    ctx: typer.Context,
    trace: Annotated[str, typer.Option("--trace", help="Trace file, or bundled:NAME.")] = (
        "bundled:conversation"
    ),
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="Workdir of `kvcast cluster up`.")
    ] = None,
    sidecar: Annotated[
        str | None, typer.Option("--sidecar", help="Sidecar URL (http:// or https://).")
    ] = None,
    agents: Annotated[str | None, typer.Option("--agents", help="Agent URLs, node order.")] = None,
    engines: Annotated[str | None, typer.Option("--engines", help=ENGINES_HELP)] = None,
    token_env: TokenEnv = SHARED_TOKEN_ENV,
    ingest_token_env: IngestTokenEnv = INGEST_TOKEN_ENV,
    start_s: Annotated[float, typer.Option("--start-s", min=0.0, help="Window start.")] = 0.0,
    window_s: Annotated[float, typer.Option("--window-s", min=0.001, help="Window length.")] = (
        120.0
    ),
    time_scale: Annotated[float, typer.Option("--time-scale", min=1e-6, help="Load x.")] = 1.0,
    load_scaling: Annotated[
        str,
        typer.Option(
            "--load-scaling", help="How --time-scale raises the load: arrivals or sessions."
        ),
    ] = "arrivals",
    speed: Annotated[float, typer.Option("--speed", min=1e-6, help="Playback x wall.")] = 1.0,
    router: Annotated[str, typer.Option("--router", help="Baseline routing rule.")] = (
        "prefix_sticky"
    ),
    block_bytes: Annotated[
        str | None, typer.Option("--block-bytes", help="Bytes per stored block.")
    ] = None,
    node_blocks: Annotated[
        int | None, typer.Option("--node-blocks", min=1, help="Engine cache per node, blocks.")
    ] = None,
    max_requests: Annotated[
        int | None,
        typer.Option("--max-requests", min=1, help="Play at most this many requests."),
    ] = None,
    max_wall_s: Annotated[
        float,
        typer.Option(
            "--max-wall-s", min=1.0, help="Start no new request after this many wall seconds."
        ),
    ] = 900.0,
    settle_s: Annotated[
        float, typer.Option("--settle-s", min=0.0, help="Wait before the final scrape.")
    ] = 2.0,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the summary JSON.")] = None,
    played_file: Annotated[Path | None, typer.Option("--played", help=PLAYED_HELP)] = None,
) -> None:
    """Play a trace window against a running cluster: route and post each arrival to the
    sidecar, store each node's new blocks into its agent and publish their vLLM KV events.
    A sidecar and agents at https:// (`cluster up --tls`) are called with the client
    certificate named in the cluster's cluster.json, or, with --sidecar and --agents, the files
    KVCAST_TLS_CERT/KEY/CA name (without them, an https:// sidecar is verified against the
    default trust store, or SSL_CERT_FILE).

    The router's arrivals, the engines' KV events and their queue depths carry the ingest
    token when there is one (with --cluster, when cluster up was started with one; else the
    --ingest-token-env variable), the block bytes the engines store and evict the shared token.
    """
    from kvcast.serving.cluster.config_gen import DECIDER_FILE, DECISION_LOG
    from kvcast.serving.cluster.layout import ReplayTargets, read_layout
    from kvcast.serving.cluster.replay import (
        ReplayInterrupted,
        ReplaySpec,
        played_trace,
        requests_of,
        run_replay,
        write_played,
    )
    from kvcast.serving.http.auth import tokens_from_env
    from kvcast.serving.tls import tls_from_env

    layout = read_layout(cluster) if cluster is not None else None
    if layout is not None:  # its variables are read: an option naming another is refused
        check_cluster_options(ctx, (layout.token_env, layout.ingest_token_env), str(cluster))
    check_token_options(ctx)
    for flag, path in (("--out", out_file), ("--played", played_file)):
        if path is not None:  # before anything is played: never after the replay
            output_file(path, flag, [("--trace", Path(trace))])
    for var in (layout.token_env, layout.ingest_token_env) if layout is not None else ():
        if var is not None and os.environ.get(var) is None:  # its calls would all be refused
            raise ValueError(
                f"the cluster in {cluster} was started with a token in {var}, which is not set "
                "here: set it as for `kvcast cluster up`"
            )
    if layout is not None and layout.token_env:
        token_env = layout.token_env
    # a cluster up without an ingest token has none: its services would not know one
    ingest_env = ingest_token_env if layout is None else layout.ingest_token_env
    token, ingest = tokens_from_env(os.environ, token_env, ingest_env)
    if layout is not None:
        targets = ReplayTargets.from_layout(layout, token, ingest)
    elif sidecar and agents:
        urls = tuple(parse_names(agents))
        pubs = None if not engines else tuple((p, None) for p in parse_names(engines))
        names = tuple(f"node-{i}" for i in range(len(urls)))
        targets = ReplayTargets(sidecar, urls, names, pubs, token, tls_from_env(), ingest)
    else:
        raise ValueError("give --cluster DIR, or --sidecar URL and --agents URL,URL,...")
    default_bytes = str(layout.block_bytes) if layout is not None else "64KiB"
    spec = ReplaySpec(
        start_s=start_s, window_s=window_s, time_scale=time_scale, load_scaling=load_scaling,
        speed=speed, router=router,
        block_bytes=_size("--block-bytes", block_bytes or default_bytes), node_blocks=node_blocks,
        max_requests=max_requests, max_wall_s=max_wall_s,
    )  # fmt: skip
    loaded = open_trace(trace)
    if not loaded.has_blocks:
        raise ValueError(f"{trace}: the trace has no block hashes to replay")
    played = played_trace(loaded, spec)
    requests = requests_of(played)
    if not requests:
        raise ValueError(f"{trace}: no request in [{start_s:g}, {start_s + window_s:g}) s")
    console.print(f"replaying {len(requests)} requests of {trace} against {targets.sidecar}")
    import httpx

    signals: list[int] = []  # SIGINT / SIGTERM received while replaying
    replayed: list[dict[str, Any]] = []  # the replay's counts, once it has finished

    async def replay_then_final() -> tuple[dict[str, Any], dict[str, Any]]:
        replayed.append(await run_replay(requests, targets, spec, loaded.block_size, update))
        return replayed[0], await _final(replayed[0], targets, settle_s)

    try:
        with progress_bar(len(requests), "replay") as update:
            stats, summary = asyncio.run(_on_signals(replay_then_final(), signals))
    except httpx.HTTPError as err:
        raise fail(f"the cluster did not answer: {type(err).__name__}: {err}") from None
    except (ReplayInterrupted, asyncio.CancelledError) as err:
        if not signals:
            raise
        if isinstance(err, ReplayInterrupted):
            played = f"{err.requests} of {err.total} requests played, {err.posted} arrivals posted"
        elif replayed:  # while collecting the summary, after the replay itself
            r = replayed[0]
            played = (f"{r['requests']} of {len(requests)} requests played, "
                      f"{r['arrivals_posted']} arrivals posted")  # fmt: skip
        else:  # before the first request
            played = "no request played"
        name = signal.Signals(signals[0]).name
        console.print(f"replay interrupted by {name}: {played} to {targets.sidecar}; no summary")
        raise typer.Exit(128 + signals[0]) from None
    out.print(_summary_table(summary))
    if out_file is not None:
        write_json_file(out_file, summary)
    t0 = stats["t0_unix_ms"]
    if played_file is not None:
        write_played(played, spec, stats["requests"], played_file)
        where = "--decisions DECISION_LOG"  # the sidecar's decision_log.path
        logged = True
        if layout is not None:
            from kvcast.predictor.decision_log_reader import written_since

            work = Path(layout.workdir)
            # the log this sidecar wrote during the replay (a log of an earlier cluster in the
            # same workdir is not it: told by when it was written, started - 1 s of slack)
            log = written_since(work / DECISION_LOG, t0 / 1000.0 - 1.0)
            logged = log is not None
            log = log or work / DECISION_LOG
            where = f"--decisions {log} --decider-config {work / DECIDER_FILE}"
        judge = (f"`kvcast shadow-eval {where} --trace {played_file} --spread off "
                 f"--clock-offset-ms {t0:.0f}`")  # fmt: skip
        if logged:
            print(f"wrote {played_file}: judge the sidecar's decisions with {judge}")
        else:
            print(
                f"wrote {played_file}; the sidecar logged no decision during the replay (its "
                "decision log is written from the first one on, decisions.N.parquet for a "
                f"restarted sidecar); once it has, judge them with {judge}"
            )
    else:
        print(
            f"trace time 0 was played at unix ms {t0:.0f} (--played FILE writes the requests "
            "as played, for kvcast shadow-eval)"
        )
    r = summary["replay"]
    failed = {k: r[k] for k in ("put_failures", "arrival_failures", "requests_unfinished")}
    if any(failed.values()):  # the cluster did not take the replay: say so in the exit code
        raise fail(f"replay incomplete: {failed}")


async def _on_signals(work: Coroutine[Any, Any, T], signals: list[int]) -> T:
    """Await ``work``, cancelling it on SIGINT or SIGTERM (whose numbers go to ``signals``)."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None

    def cancel(signum: int) -> None:
        if not signals:
            signals.append(signum)
            task.cancel()

    handled = (signal.SIGINT, signal.SIGTERM)
    for s in handled:
        loop.add_signal_handler(s, cancel, s)
    try:
        return await work
    finally:
        for s in handled:
            loop.remove_signal_handler(s)


async def _final(stats: dict[str, Any], targets: Any, settle_s: float) -> dict[str, Any]:
    import httpx

    from kvcast.serving.cluster.summary import collect, summarize

    await asyncio.sleep(settle_s)
    verify = True if targets.tls is None else targets.tls.client_context()
    async with httpx.AsyncClient(timeout=10.0, verify=verify) as http:
        side, agents, telemetry = await collect(http, targets.sidecar, targets.agents)
    return summarize(stats, side, agents, telemetry, stats["nodes"])
