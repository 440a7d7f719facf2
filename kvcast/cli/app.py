"""The ``kvcast`` command."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcast import __version__
from kvcast.cli.cluster import cluster_app
from kvcast.cli.evaluate import evaluate_cmd
from kvcast.cli.features import features_cmd
from kvcast.cli.help_text import tidy_help
from kvcast.cli.quickstart import quickstart_cmd
from kvcast.cli.serve import serve_app
from kvcast.cli.shadow import shadow_eval_cmd
from kvcast.cli.simulate import simulate_cmd
from kvcast.cli.trace import trace_app
from kvcast.cli.train import score_cmd, train_cmd
from kvcast.cli.verdict import verdict_cmd

app = typer.Typer(
    name="kvcast",
    help="Predict per-block KV bursts and replicate ahead of them; measure it by trace replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("simulate")(simulate_cmd)
app.command("evaluate")(evaluate_cmd)
app.command("verdict")(verdict_cmd)
app.command("quickstart")(quickstart_cmd)
app.command("features")(features_cmd)
app.command("train")(train_cmd)
app.command("score")(score_cmd)
app.command("shadow-eval")(shadow_eval_cmd)
app.add_typer(serve_app, name="serve")
app.add_typer(cluster_app, name="cluster")
app.add_typer(trace_app, name="trace")


@app.command("policies")
def policies_cmd() -> None:
    """List the routing policies the simulator knows."""
    from kvcast.simulator.policies import policy_names

    for name in policy_names():
        typer.echo(name)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvcast {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    """kvcast: predictive KV-cache replication for LLM serving clusters."""


tidy_help(app)  # after every command is registered


def main() -> None:
    app()
