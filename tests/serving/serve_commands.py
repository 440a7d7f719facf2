"""``kvcast serve sidecar`` and ``kvcast serve agent`` command lines with a config file that
holds the given tenant tokens: what the tests of start-up refusals invoke (typer's
CliRunner), before any port is bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def serve_command(kind: str, tmp_path: Path, tenant_tokens: list[dict[str, Any]]) -> list[str]:
    """``serve KIND`` (sidecar or agent) on loopback port 0, with a config file in
    ``tmp_path`` whose ``tenant_tokens`` are these."""
    path = tmp_path / f"{kind}.yaml"
    if kind == "sidecar":
        data = {"listen": "127.0.0.1:0", "nodes": [{"name": "a"}], "tenant_tokens": tenant_tokens,
                "decision_log": {"path": None}}  # fmt: skip
        path.write_text(yaml.safe_dump(data))
        return ["serve", "sidecar", "--config", str(path)]
    path.write_text(yaml.safe_dump({"tenant_tokens": tenant_tokens}))
    return ["serve", "agent", "--config", str(path), "--listen", "127.0.0.1:0",
            "--transfer-listen", "127.0.0.1:0", "--capacity", "64MiB",
            "--speculative-quota", "8MiB"]  # fmt: skip
