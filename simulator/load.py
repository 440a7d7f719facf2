"""The trace as the simulator plays it at one load (``time_scale``): the arrival spread, then
the load scaling (compressed arrivals, or sessions drawn), the loads a trace cannot be
played at (:class:`LoadOutOfRange`: a capacity search stops there), and its columns as the
event loop reads them (:class:`TraceArrays`)."""

from __future__ import annotations

import numpy as np

from kvcast.features.traces.dequantize import spread_quantized
from kvcast.features.traces.load_scaling import scale_load
from kvcast.features.traces.sessions import session_ids
from kvcast.features.traces.table import Trace
from kvcast.simulator.config import SimConfig

MAX_TELEMETRY_PERIODS = 1_000_000  # 11.6 simulated days at the default 1 s period
MAX_SCALED_REQUESTS = 20_000_000  # a sessions load past this would not fit in memory


class LoadOutOfRange(ValueError):
    """A time-scale the trace cannot be played at (too low or too high for it): the message
    names the time-scale and why. A capacity search stops at such a load."""


def check_load(trace: Trace, time_scale: float, cfg: SimConfig) -> None:
    """Refuse, before any scaling, a time-scale that is not a positive finite number or that
    would make the run unsampleable (arrivals) or too large (sessions)."""
    try:
        good = bool(np.isfinite(time_scale) and time_scale > 0)
    except TypeError:
        good = False
    if not good:
        raise ValueError(f"time-scale must be a positive finite number, got {time_scale!r}")
    if not len(trace):
        return
    if cfg.load_scaling == "sessions":
        expected = len(trace) * time_scale
        if expected > MAX_SCALED_REQUESTS:
            raise LoadOutOfRange(
                f"time-scale {time_scale:g} with load_scaling: sessions replays the trace's "
                f"{len(trace):,} requests into about {expected:,.0f}: over "
                f"{MAX_SCALED_REQUESTS:,}; use a smaller time-scale"
            )
        return
    _check_span(trace, time_scale, cfg, time_scale)


def _check_span(trace: Trace, time_scale: float, cfg: SimConfig, divide_by: float) -> None:
    """A LoadOutOfRange when ``trace``'s arrivals, divided by ``divide_by``, span more
    telemetry periods than a run can step through."""
    arrivals = trace.requests["arrival_ms"]
    span = float(arrivals.max() - arrivals.min()) / divide_by
    if span / cfg.telemetry_period_ms > MAX_TELEMETRY_PERIODS:
        spread = cfg.arrival_spread
        numeric = not isinstance(spread, str)
        raise LoadOutOfRange(
            f"time-scale {time_scale!r}"
            + (f" with arrival_spread {spread:g} ms" if numeric else "")
            + f" stretches the trace to {span / 3.6e6:.3g} hours: over "
            f"{MAX_TELEMETRY_PERIODS:,} telemetry periods of {cfg.telemetry_period_ms:g} ms; "
            + ("use a smaller arrival_spread or a larger time-scale" if numeric
               else "use a larger time-scale")
            + _outlier(trace)
        )  # fmt: skip


def _outlier(trace: Trace) -> str:
    """Where most of a trace's span is one gap between two arrivals (a stray timestamp: unix
    ms among relative ones), a note naming the request that stands apart; else ""."""
    arrivals = trace.requests["arrival_ms"].to_numpy(dtype=float)
    order = np.argsort(arrivals, kind="stable")
    ts = arrivals[order]
    if len(ts) < 3:
        return ""
    gaps = np.diff(ts)
    i = int(np.argmax(gaps))
    if gaps[i] < 0.9 * (ts[-1] - ts[0]):
        return ""
    hours = f"{gaps[i] / 3.6e6:.3g} hours"
    ids = trace.requests["request_id"].to_numpy()
    if i == 0:  # the earliest stands apart
        r, where = order[0], f"arrives {hours} before the rest"
    elif i == len(gaps) - 1:  # the latest
        r, where = order[-1], f"arrives {hours} after the rest"
    else:
        r, where = order[i + 1], f"comes {hours} after the request before it"
    return (
        f"; or check the trace's timestamps: request {ids[r]!r} (at {arrivals[r]:.6g} ms) {where}"
    )


def check_ticks(trace: Trace, tick_ms: float) -> None:
    """A LoadOutOfRange when a replicator ticking every ``tick_ms`` would tick more than
    :data:`MAX_TELEMETRY_PERIODS` times over ``trace`` (as played): a tick of microseconds
    would run for hours, not fail."""
    arrivals = trace.requests["arrival_ms"]
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    if span / tick_ms > MAX_TELEMETRY_PERIODS:
        raise LoadOutOfRange(
            f"a decider tick (loop.tick_ms) of {tick_ms:g} ms over the trace's "
            f"{span / 1000:,.0f} s is {span / tick_ms:,.0f} ticks: over "
            f"{MAX_TELEMETRY_PERIODS:,}; use a larger loop.tick_ms"
        )


def load_scaled(trace: Trace, time_scale: float, cfg: SimConfig) -> Trace:
    """``trace`` as ``cfg`` plays it at ``time_scale`` (arrival spread, then load scaling);
    a LoadOutOfRange naming the time-scale where that leaves no request of a trace that had
    some (a ``sessions`` load below 1 keeps each session with probability X, so on a short
    trace it may draw none: refused rather than reported as NaN metrics)."""
    check_load(trace, time_scale, cfg)
    if cfg.arrival_spread != "off":
        q = None if cfg.arrival_spread == "auto" else float(cfg.arrival_spread)
        trace = spread_quantized(trace, q, seed=cfg.seed)
    scaled = scale_load(trace, time_scale, cfg.load_scaling, cfg.seed)
    if len(scaled) and cfg.arrival_spread not in ("auto", "off"):
        _check_span(scaled, time_scale, cfg, 1.0)  # a forced quantum may stretch it past
    if len(trace) and not len(scaled):
        sessions = len(np.unique(session_ids(trace.requests)))
        raise LoadOutOfRange(
            f"time-scale {time_scale:g} with load_scaling: sessions drew none of the trace's "
            f"{sessions} sessions (each is kept with probability {time_scale:g}); use a "
            "larger time-scale or a longer trace"
        )
    return scaled


class TraceArrays:
    """Column views of the trace for the hot loop; a request's block list is converted to
    Python ints only when it arrives, so the simulator's own memory follows live requests."""

    __slots__ = ("arrivals", "block_col", "ids", "inputs", "outputs", "session_col", "tenants")

    def __init__(self, trace: Trace) -> None:
        df = trace.requests
        self.arrivals = df["arrival_ms"].to_numpy(dtype=np.float64)
        self.inputs = df["input_tokens"].to_numpy()
        self.outputs = df["output_tokens"].to_numpy()
        self.block_col = df["block_hashes"].to_numpy()
        self.ids = df["request_id"].to_numpy(dtype=object)
        self.tenants = df["tenant"].to_numpy(dtype=object)
        self.session_col = df["session"].to_numpy(dtype=object, na_value=None)

    def blocks(self, r: int) -> list[int]:
        return list(map(int, self.block_col[r]))
