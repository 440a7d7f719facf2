"""The agent workload's parameters (``configs/traces/agent.yaml``), frozen and validated.

The defaults here are that file's values (a test keeps the two equal). Every length is in
tokens, every time in seconds; a *lognormal* is given by its median and the sigma of its log.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from kvcast.config import FrozenConfig, load_config


class LogNormal(FrozenConfig):
    """``median x exp(sigma x N(0, 1))``, clipped to ``[low, high]``."""

    median: float = Field(gt=0, allow_inf_nan=False)
    sigma: float = Field(ge=0, allow_inf_nan=False)
    low: float = Field(0.0, ge=0, allow_inf_nan=False)
    high: float = Field(float("inf"), gt=0)  # no upper clip by default

    @model_validator(mode="after")
    def _ordered(self) -> LogNormal:
        if not self.low <= self.median <= self.high:
            raise ValueError(
                f"need low <= median <= high, got {self.low}, {self.median}, {self.high}"
            )
        return self


MAX_TASKS = 1_000_000  # tasks in one trace (x mean_steps requests)


class AgentTraceConfig(FrozenConfig):
    """Agent tasks: each a run of model calls around one app's system prompt and tool
    descriptions, every call's context the last one's plus its output and the tool's result,
    the next call coming once the output is generated and the tool has run."""

    duration_s: float = Field(
        1200.0, gt=0, allow_inf_nan=False
    )  # requests arriving later are not written
    tasks_per_s: float = Field(0.4, gt=0, allow_inf_nan=False)  # new tasks (Poisson arrivals)
    apps: int = Field(8, ge=1)  # agent apps, each with its own shared prefix
    app_zipf: float = Field(1.0, ge=0, allow_inf_nan=False)  # app popularity ~ rank^-s (0: uniform)
    prefix_tokens: LogNormal = LogNormal(median=6000, sigma=0.5, low=512, high=32000)
    task_tokens: LogNormal = LogNormal(median=800, sigma=0.8, low=16, high=16000)
    mean_steps: float = Field(8.0, ge=1, allow_inf_nan=False)  # model calls per task (geometric)
    max_steps: int = Field(40, ge=1)
    output_tokens: LogNormal = LogNormal(median=150, sigma=0.8, low=1, high=4000)
    tool_result_tokens: LogNormal = LogNormal(median=600, sigma=1.0, low=0, high=16000)
    tool_s: LogNormal = LogNormal(median=3.0, sigma=1.0, low=0.05, high=300)  # tool latency
    fanout_p: float = Field(0.0, ge=0, le=1)  # a call starts several tools at once
    fanout_calls: int = Field(4, ge=2)  # ... this many, each answered by its own call
    model_base_s: float = Field(
        0.5, ge=0, allow_inf_nan=False
    )  # a call's own time: base + output x per token
    decode_s_per_token: float = Field(0.03, ge=0, allow_inf_nan=False)
    max_context_tokens: int = Field(128_000, ge=1)  # a task ends before its context exceeds this
    block_tokens: int = Field(512, ge=1)  # tokens per hash id (Mooncake: 512)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _steps(self) -> AgentTraceConfig:
        if self.mean_steps > self.max_steps:
            raise ValueError(f"mean_steps {self.mean_steps} exceeds max_steps {self.max_steps}")
        tasks = self.tasks_per_s * self.duration_s
        if tasks > MAX_TASKS:  # a trace no run could replay, built for hours first
            raise ValueError(
                f"tasks_per_s {self.tasks_per_s:g} over duration_s {self.duration_s:g} is "
                f"about {tasks:,.0f} tasks (x{self.mean_steps:g} calls each): over "
                f"{MAX_TASKS:,}; lower one of them"
            )
        return self


def load_agent_config(path: str | Path | None = None) -> AgentTraceConfig:
    """The config at ``path``, or the built-in defaults."""
    return AgentTraceConfig() if path is None else load_config(AgentTraceConfig, path)
