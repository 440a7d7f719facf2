"""A synthetic agent workload: the traffic the source documents expect prediction to pay on.

Source document 000 names multi-turn agent tasks as the most realistic case for predictive
replication: an agent calls the model again and again around the same system prompt, tool
descriptions and task history, and the next call follows the tool's return after the tool's
run time, which the transfer can hide in. The two bundled traces are chat (a next turn
42-456 s later) and dataset replays; this generator writes the agent case as a Mooncake JSONL
trace, from :class:`~kvcast.features.traces.agent_config.AgentTraceConfig`:

- tasks arrive as a Poisson process; each picks an app (Zipf popularity) whose system prompt
  and tool descriptions (``prefix_tokens``) every task of that app shares;
- a task makes ``steps`` calls (geometric, mean ``mean_steps``, at most ``max_steps``, and
  never past ``max_context_tokens``): the first reads the app's prefix and the task's prompt;
  each next one reads the last one's context plus its output and the tool's result, and
  arrives ``model_base_s + output x decode_s_per_token + tool_s`` after it;
- with probability ``fanout_p`` a call starts ``fanout_calls`` tools at once (parallel tool
  use, sub-agents): one call per result, each reading the shared context plus its own
  result, arrives as its tool finishes, a burst on one prefix; the task goes on once all are
  answered, its next call reading every result and answer;
- hash ids follow the trace's rule: one id per ``block_tokens`` of the prompt, equal ids
  for equal prefixes. A call's last, partial block is its own; once the context grows past
  it, the full block it becomes has a new id (its tokens differ), as a real block hash would.

The trace is open loop, like every trace the simulator replays: a call's time is set by the
generator's estimate of the previous call's duration, not by the simulated cluster's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvcast.features.traces.agent_config import AgentTraceConfig, LogNormal


class _Ids:
    """Fresh block ids, counting up from 0."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def _draw(rng: np.random.Generator, d: LogNormal, size: int | None = None) -> np.ndarray:
    x = d.median * np.exp(d.sigma * rng.standard_normal(size))
    return np.clip(x, d.low, d.high)


class _Context:
    """A prompt as hash ids: its full blocks and the tokens of its last, partial one."""

    def __init__(self, blocks: list[int], tail: int, block_tokens: int) -> None:
        self.blocks, self.tail, self.bt = blocks, tail, block_tokens

    @property
    def tokens(self) -> int:
        return len(self.blocks) * self.bt + self.tail

    def extended(self, tokens: int, ids: _Ids) -> _Context:
        total = self.tail + tokens
        return _Context(self.blocks + ids.take(total // self.bt), total % self.bt, self.bt)

    def hash_ids(self, ids: _Ids) -> list[int]:
        return self.blocks + (ids.take(1) if self.tail else [])


Row = tuple[float, int, int, list[int], str]


def _fan_out(
    cfg: AgentTraceConfig,
    rng: np.random.Generator,
    ids: _Ids,
    ctx: _Context,
    t_ms: float,
    out: int,
    session: str,
    rows: list[Row],
) -> tuple[float, _Context]:
    """The call at ``t_ms`` (context ``ctx``, ``out`` tokens of output) started
    ``fanout_calls`` tools at once: one call per tool result, each reading the shared context
    and its own result, arriving when its tool is done; then the task's next call, once all of
    them are answered, reads every result and answer. Returns that call's time and context."""
    per_token, base_s = cfg.decode_s_per_token, cfg.model_base_s
    done_ms = t_ms + 1000.0 * (base_s + out * per_token)
    shared = ctx.extended(out, ids)
    next_ms, added = done_ms, 0
    for _ in range(cfg.fanout_calls):
        tool = _draw(rng, cfg.tool_s).item()
        result = round(_draw(rng, cfg.tool_result_tokens).item())
        answer = round(_draw(rng, cfg.output_tokens).item())
        branch = shared.extended(result, ids)
        at = done_ms + 1000.0 * tool
        if at < cfg.duration_s * 1000.0 and branch.tokens <= cfg.max_context_tokens:
            rows.append((at, branch.tokens, answer, branch.hash_ids(ids), session))
        next_ms = max(next_ms, at + 1000.0 * (base_s + answer * per_token))
        added += result + answer
    return next_ms, shared.extended(added, ids)


def agent_trace(cfg: AgentTraceConfig) -> pd.DataFrame:
    """The workload of ``cfg``: columns ``arrival_ms, input_tokens, output_tokens,
    block_hashes, session`` (the task), sorted by arrival."""
    rng = np.random.default_rng(cfg.seed)
    ids = _Ids()
    bt = cfg.block_tokens
    prefixes = [
        _Context([], 0, bt).extended(int(t), ids)
        for t in _draw(rng, cfg.prefix_tokens, cfg.apps).round()
    ]
    weights = 1.0 / np.arange(1, cfg.apps + 1) ** cfg.app_zipf
    weights /= weights.sum()
    n_tasks = int(rng.poisson(cfg.tasks_per_s * cfg.duration_s))
    starts = np.sort(rng.uniform(0.0, cfg.duration_s, n_tasks))
    end_ms = cfg.duration_s * 1000.0
    rows: list[Row] = []
    for task, start in enumerate(starts.tolist()):
        app = int(rng.choice(cfg.apps, p=weights))
        steps = min(int(rng.geometric(1.0 / cfg.mean_steps)), cfg.max_steps)
        ctx = prefixes[app].extended(round(_draw(rng, cfg.task_tokens).item()), ids)
        t_ms = start * 1000.0
        session = f"a{app}-task{task}"
        for _ in range(steps):
            if t_ms >= end_ms or ctx.tokens > cfg.max_context_tokens:
                break
            out = round(_draw(rng, cfg.output_tokens).item())
            rows.append((t_ms, ctx.tokens, out, ctx.hash_ids(ids), session))
            if cfg.fanout_p > 0.0 and rng.random() < cfg.fanout_p:
                t_ms, ctx = _fan_out(cfg, rng, ids, ctx, t_ms, out, session, rows)
                continue
            tool = _draw(rng, cfg.tool_s).item()
            t_ms += 1000.0 * (cfg.model_base_s + out * cfg.decode_s_per_token + tool)
            result = round(_draw(rng, cfg.tool_result_tokens).item())
            ctx = ctx.extended(out + result, ids)
    df = pd.DataFrame(
        rows, columns=["arrival_ms", "input_tokens", "output_tokens", "block_hashes", "session"]
    ).astype({"arrival_ms": "float64", "input_tokens": "int64", "output_tokens": "int64"})
    return df.sort_values("arrival_ms", kind="stable", ignore_index=True)  # (typed when empty)
