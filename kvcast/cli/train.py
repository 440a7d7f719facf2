"""``kvcast train`` (= ``python training/train.py``) and ``kvcast score``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kvcast.cli.common import (
    check_time_scale,
    console,
    progress_bar,
    user_errors,
    write_json,
)
from kvcast.output_paths import output_dir
from kvcast.training.config import REPLAY_KEYS, TrainConfig
from kvcast.training.evaluate import METRICS
from kvcast.training.registry import MODEL_KINDS

out_console = Console(emoji=False)


def metrics_table(title: str, columns: dict[str, dict[str, Any]]) -> Table:
    """One row per metric a run records (:data:`METRICS`: ``ece_quantile`` after ``ece``)."""
    table = Table("metric", *columns, title=title, title_justify="left")
    for name in METRICS:
        cells = []
        for m in columns.values():
            v = m.get(name)
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        table.add_row(name, *cells)
    return table


KINDS = tuple(MODEL_KINDS)  # recency, rule, lgbm, tcn


def baseline_name(kind: str) -> str:
    """The recency baseline's column beside a model of ``kind`` (the recency kind is a
    model too: one name for both would show the baseline only)."""
    return "recency baseline" if kind == "recency" else "recency"


def train_config(
    config: Path | None,
    trace: str | None,
    features: Path | None,
    out: Path | None,
    track: bool,
    kind: str | None = None,
) -> TrainConfig:
    """The run's :class:`TrainConfig`: ``config``'s file, or with ``kind`` instead the
    embedded defaults for that model kind (exactly one of the two), then the overrides.

    The command line wins over the file: ``trace`` clears the file's ``data.features`` (a
    replay), ``features`` its replay settings (``REPLAY_KEYS``: no replay, the table was made
    with its own). A file that sets both is refused
    (:class:`kvcast.training.config.DataConfig`)."""
    from kvcast.config import parse_config, read_yaml

    if trace is not None and features is not None:  # features skip the replay of a trace
        raise ValueError("give --trace or --features, not both (--features: no replay)")
    if (config is None) == (kind is None):
        how = ("give --config FILE (configs/train/*.yaml) or --kind KIND (embedded defaults: "
               f"{', '.join(KINDS)})")  # fmt: skip
        raise ValueError(f"{how}, not both" if config else f"{how}: neither was given")
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
        data: Any = {"model": {"kind": kind}}
    else:
        assert config is not None
        data = read_yaml(config)
    if not isinstance(data, dict):
        raise ValueError(f"{config}: a train config is a mapping, got {type(data).__name__}")
    for key in ("data", "tracking"):
        if not isinstance(data.get(key) or {}, dict):
            raise ValueError(f"{config}: key {key!r} must be a mapping")
    section = dict(data.get("data") or {})
    if trace is not None:  # a replay: the file's features table goes
        section |= {"trace": trace, "features": None}
    if features is not None:  # no replay: the file's replay settings go (back to defaults)
        section = {k: v for k, v in section.items() if k not in REPLAY_KEYS}
        section["features"] = str(features)
    data = {**data, "data": section}
    if out is not None:
        data["out_dir"] = str(out)
    if not track:
        data["tracking"] = {**(data.get("tracking") or {}), "enabled": False}
    return parse_config(TrainConfig, data, source=str(config) if config else f"--kind {kind}")


@user_errors
def train_cmd(
    config: Annotated[
        Path | None, typer.Option("--config", help="Train YAML (configs/train/*.yaml).")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            help=f"Instead of --config: this kind's embedded defaults ({', '.join(KINDS)}).",
        ),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            help="Override data.trace (path or bundled:NAME); clears the config's "
            "data.features (the trace is replayed).",
        ),
    ] = None,
    features: Annotated[
        Path | None,
        typer.Option(
            "--features",
            help="Train on this features.parquet (no replay); resets the config's replay "
            f"settings ({', '.join(f'data.{k}' for k in REPLAY_KEYS)}) to their defaults.",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Override out_dir.")] = None,
    track: Annotated[bool, typer.Option("--track/--no-track", help="MLflow tracking.")] = True,
) -> None:
    """Train one model kind, export it to ONNX, evaluate on the test window, track in MLflow."""
    from kvcast.training.pipeline import run_training

    cfg = train_config(config, trace, features, out, track, kind)
    with console.status(f"train {cfg.kind}") as status:
        result = run_training(cfg, stage=lambda s: status.update(f"train {cfg.kind}: {s}"))
    m = result.metrics
    out_console.print(
        metrics_table(
            f"{cfg.kind}: test window",
            {cfg.kind: m["test"], baseline_name(cfg.kind): m["test_recency"]},
        )
    )
    out_console.print(
        f"model: {result.model_path} (ONNX parity {m['onnx_parity_max_abs']:.2g} <= "
        f"{m['onnx_parity_tolerance']:.2g}, "
        f"fit {m['fit_seconds']:.1f} s, total {m['train_seconds']:.1f} s)"
    )
    if result.registered:
        reason = m.get("champion", {}).get("champion.reason", "")
        out_console.print(f"registered {result.registered}: champion {result.champion} ({reason})")
    metric = cfg.tracking.champion_metric
    mine, base = m["test"][metric], m["test_recency"][metric]
    if cfg.kind != "recency" and not mine > base:  # NaN too
        console.print(
            f"[yellow]warning:[/] the {cfg.kind} model's test {metric} {mine:.4g} is not above "
            f"its recency baseline's {base:.4g}: it adds nothing over predictive_recency on "
            "this trace"
        )


@user_errors
def score_cmd(
    trace: Annotated[str, typer.Option("--trace", help="Trace file, or bundled:NAME.")],
    model: Annotated[
        str, typer.Option("--model", help="ONNX file, or models:/name@alias (MLflow).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/score"
    ),
    format: Annotated[str, typer.Option("--format", help="auto, mooncake, azure, parquet.")] = (
        "auto"
    ),
    config: Annotated[
        Path | None, typer.Option("--config", help="Simulator YAML for the replay.")
    ] = None,
    policy: Annotated[str, typer.Option("--policy", help="Router of the replay.")] = "dynamo_kv",
    time_scale: Annotated[float, typer.Option("--time-scale", help="Load multiplier.")] = 1.0,
    budget_k: Annotated[int, typer.Option("--budget-k", help="Blocks per tick.")] = 64,
    threads: Annotated[int, typer.Option("--threads", help="onnxruntime threads.")] = 1,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad trace lines.")] = False,
) -> None:
    """Score a trace with an exported model; write metrics.json beside the recency baseline."""
    from kvcast.predictor.scorer import OnnxScorer
    from kvcast.training.scoring import score_trace

    check_time_scale(time_scale)
    if budget_k < 1:
        raise ValueError(f"--budget-k must be >= 1, got {budget_k}")
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    output_dir(out)  # before the replay
    scorer = OnnxScorer.load(model, threads=threads)
    with progress_bar(None, f"replay and score ({scorer.kind})") as update:
        result = score_trace(
            scorer,
            trace,
            fmt=format,
            skip_bad=skip_bad,
            simulator_config=config,
            policy=policy,
            time_scale=time_scale,
            budget_k=budget_k,
            progress=update,
        )
    result["model_uri"] = model
    path = write_json(out / "metrics.json", result)
    cols = {scorer.kind: result["model"]} | (
        {baseline_name(scorer.kind): result["recency"]} if "recency" in result else {}
    )
    out_console.print(metrics_table(f"{trace}", cols))
    n, pos = result["rows"], result["positives"]
    if pos in (0, n):  # ranking metrics need both classes among the scored rows
        which, undefined = (("positive", "PR-AUC, ROC-AUC and recall at budget are") if pos == 0
                            else ("negative", "ROC-AUC is (and PR-AUC trivially 1)"))  # fmt: skip
        console.print(
            f"[yellow]warning:[/] no {which} row among the {n:,} scored: {undefined} undefined "
            "here (nan in the table, null in metrics.json)"
        )
    out_console.print(f"wrote {path}")
