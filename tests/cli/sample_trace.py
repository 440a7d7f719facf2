"""The bundled conversation sample, or its first lines, as a trace file for a CLI test."""

from __future__ import annotations

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "kvcast/data/traces/conversation_sample.jsonl"


def head(tmp_path: Path, lines: int = 400) -> Path:
    """The sample's first ``lines`` requests, written under ``tmp_path``."""
    p = tmp_path / f"head{lines}.jsonl"
    p.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:lines]))
    return p
