"""Small hand-made traces and cluster configs for the simulator tests (imported by them)."""

from __future__ import annotations

from kvcast.config import parse_config
from kvcast.features.traces import Trace
from kvcast.features.traces.table import make_table
from kvcast.simulator.config import SimConfig


def tiny_trace(rows: list[tuple[float, int, int, list[int]]], name: str = "tiny") -> Trace:
    """rows: (arrival_ms, input_tokens, output_tokens, block_hashes) with 512-token blocks."""
    return Trace(
        make_table(
            arrival_ms=[r[0] for r in rows],
            input_tokens=[r[1] for r in rows],
            output_tokens=[r[2] for r in rows],
            block_hashes=[r[3] for r in rows],
        ),
        name=name,
        block_size=512,
    )


def config(**data: object) -> SimConfig:
    return parse_config(SimConfig, dict(data), source="<test>")
