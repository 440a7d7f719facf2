"""``kvcast quickstart``: the whole pipeline on the bundled trace with embedded defaults.

Today it evaluates every policy the simulator knows (the anchors' routers, the oracle and the
recency predictor) on the bundled conversation sample at two loads, searches each one's
capacity, prints the table and writes the plots. Training the learned models into the
comparison is on the README roadmap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvcast.cli.common import console, user_errors
from kvcast.cli.simulate import run_evaluation
from kvcast.simulator.config import SimConfig
from kvcast.simulator.policies import policy_names


@user_errors
def quickstart_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "kvcast-out/quickstart"
    ),
) -> None:
    """Compare every routing policy on the bundled trace (no services, no downloads)."""
    console.print(
        "[bold]kvcast quickstart[/]: bundled Mooncake conversation sample, "
        "embedded defaults (8 nodes, Llama-3-70B fp16 KV, 100 Gb/s)"
    )
    run_evaluation(
        "bundled:conversation", "auto", SimConfig(), policy_names(), [1.0, 2.0], True, out
    )
