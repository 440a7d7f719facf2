"""A simulation's event stream, recorded for the offline feature pipeline.

The training table is built from exactly the events the live sidecar would see: the
simulator replays the trace under a router and every event goes to the feature pipeline
(:func:`kvcast.features.build_feature_dataset`). :func:`feature_config_for` makes the
feature config agree with the cluster it describes (nodes, block size, model, prefill cost).
"""

from __future__ import annotations

from kvcast.config import with_overrides
from kvcast.features.config import FeatureConfig
from kvcast.features.events import Event
from kvcast.features.traces import Trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import Progress, simulate


def feature_config_for(sim: SimConfig, trace: Trace, base: FeatureConfig) -> FeatureConfig:
    """``base`` with the cluster facts taken from the simulator config and the trace."""
    return with_overrides(
        base,
        nodes=sim.nodes,
        block_tokens=sim.block_tokens or trace.block_size,
        model=sim.model.preset,
        kv_dtype=sim.model.kv_dtype,
        prefill=sim.node.prefill,
    )


def record_events(
    trace: Trace,
    sim: SimConfig,
    policy: str = "dynamo_kv",
    *,
    time_scale: float = 1.0,
    progress: Progress | None = None,
) -> list[Event]:
    """Replay ``trace`` and return every event the simulator emitted, in order."""
    events: list[Event] = []
    simulate(
        trace, sim, policy, time_scale=time_scale, observers=[events.append], progress=progress
    )
    return events
