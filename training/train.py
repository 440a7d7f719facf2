"""Train a burst predictor: ``python training/train.py --config configs/train/<kind>.yaml``.

The same command as ``kvcast train`` (options: ``--kind`` instead of ``--config`` for a kind's
embedded defaults, ``--trace``, ``--features``, ``--out``, ``--no-track``); see
:mod:`kvcast.training.pipeline` for what a run does.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import typer

    from kvcast.cli.train import train_cmd

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train_cmd)
    try:
        app(args=argv if argv is not None else sys.argv[1:], prog_name="train.py")
    except SystemExit as done:  # click's standalone mode always exits
        return done.code if isinstance(done.code, int) else 1
    return 0


if __name__ == "__main__":
    # run as a script, this folder is sys.path[0]; drop it so that its modules (config.py,
    # data.py ...) can never shadow a top-level module of another package
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main())
