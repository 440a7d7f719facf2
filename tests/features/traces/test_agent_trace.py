"""The synthetic agent workload keeps its rules: prefix chains, arrival spacing, shared app
prompts, block counts, rates and limits; its YAML is the built-in default."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvcast.config import ConfigError, parse_config
from kvcast.features.traces.agent_config import AgentTraceConfig, LogNormal, load_agent_config
from kvcast.features.traces.agent_trace import agent_trace

DEFAULT_YAML = Path(__file__).resolve().parents[3] / "configs" / "traces" / "agent.yaml"
SMALL = AgentTraceConfig(duration_s=600.0, tasks_per_s=0.3, seed=3)


@pytest.fixture(scope="module")
def trace() -> pd.DataFrame:
    return agent_trace(SMALL)


def _tasks(df: pd.DataFrame) -> list[pd.DataFrame]:
    return [g for _, g in df.groupby("session", sort=False) if len(g) > 1]


def test_default_yaml_equals_the_built_in_defaults() -> None:
    assert load_agent_config(DEFAULT_YAML) == AgentTraceConfig() == load_agent_config()


def test_each_call_reads_the_last_calls_full_blocks_then_new_ones(trace: pd.DataFrame) -> None:
    bt = SMALL.block_tokens
    checked = 0
    for task in _tasks(trace):
        rows = list(task.itertuples(index=False))
        for prev, nxt in pairwise(rows):
            full = prev.input_tokens // bt  # the last call's partial block is not reused
            assert nxt.block_hashes[:full] == prev.block_hashes[:full]
            assert nxt.input_tokens >= prev.input_tokens + prev.output_tokens
            new = set(nxt.block_hashes[full:])
            assert not new & set(prev.block_hashes)  # a grown block has a new id
            checked += 1
    assert checked > 100


def test_one_hash_id_per_block_of_the_prompt(trace: pd.DataFrame) -> None:
    bt = SMALL.block_tokens
    counts = trace["block_hashes"].map(len).to_numpy()
    assert (counts == np.ceil(trace["input_tokens"].to_numpy() / bt)).all()


def test_the_next_call_waits_for_the_output_and_the_tool(trace: pd.DataFrame) -> None:
    c = SMALL
    for task in _tasks(trace):
        t = task["arrival_ms"].to_numpy()
        out = task["output_tokens"].to_numpy()[:-1]
        least = 1000.0 * (c.model_base_s + out * c.decode_s_per_token + c.tool_s.low)
        most = 1000.0 * (c.model_base_s + out * c.decode_s_per_token + c.tool_s.high)
        gaps = np.diff(t)
        assert (gaps >= least - 1e-6).all() and (gaps <= most + 1e-6).all()


def test_tasks_of_one_app_share_its_prompt_and_apps_share_nothing(trace: pd.DataFrame) -> None:
    first = trace.groupby("session", sort=False).first()
    app = first.index.str.split("-").str[0]
    prefixes: dict[str, set[int]] = {}
    for a, hashes in zip(app, first["block_hashes"], strict=True):
        common = prefixes.get(a)
        prefixes[a] = set(hashes) if common is None else common & set(hashes)
    shared = [p for a, p in prefixes.items() if (app == a).sum() > 1]
    assert shared and all(p for p in shared)  # every app's tasks share its prompt blocks
    for i, p in enumerate(shared):  # and no block crosses apps
        for q in shared[i + 1 :]:
            assert not p & q


def test_arrivals_stay_in_the_duration_and_are_sorted(trace: pd.DataFrame) -> None:
    t = trace["arrival_ms"].to_numpy()
    assert (np.diff(t) >= 0).all() and t.min() >= 0 and t.max() < SMALL.duration_s * 1000


def test_task_rate_and_steps_follow_the_config() -> None:
    cfg = AgentTraceConfig(duration_s=20_000.0, tasks_per_s=0.2, mean_steps=5.0, seed=1)
    df = agent_trace(cfg)
    tasks = df["session"].nunique()
    mean = cfg.tasks_per_s * cfg.duration_s  # Poisson: within 5 sigma
    assert abs(tasks - mean) < 5 * math.sqrt(mean)
    # steps: geometric with mean 5, cut by the duration's end (a few tasks) and max_steps
    steps = df.groupby("session").size()
    assert 4.5 < steps.mean() <= 5.2
    assert steps.max() <= cfg.max_steps


def test_context_never_exceeds_the_limit() -> None:
    cfg = AgentTraceConfig(duration_s=2000.0, max_context_tokens=12_000, mean_steps=20, seed=2)
    df = agent_trace(cfg)
    assert len(df) and (df["input_tokens"] <= 12_000).all()


def test_the_seed_decides_the_trace() -> None:
    a, b = agent_trace(SMALL), agent_trace(SMALL)
    pd.testing.assert_frame_equal(a, b)
    other = agent_trace(AgentTraceConfig(duration_s=600.0, tasks_per_s=0.3, seed=4))
    assert not a["arrival_ms"].equals(other["arrival_ms"])


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"mean_steps": 50.0}, "mean_steps"),
        ({"tool_s": {"median": 1.0, "sigma": 1.0, "low": 2.0}}, "low <= median"),
        ({"tasks_per_s": 0}, "tasks_per_s"),
        ({"bogus": 1}, "unknown key"),
        ({"duration_s": math.inf}, "duration_s.*finite"),
        ({"tasks_per_s": math.inf}, "tasks_per_s.*finite"),
        ({"prefix_tokens": {"median": math.inf, "sigma": 0.5}}, "prefix_tokens.*finite"),
    ],
)
def test_bad_config_is_refused_naming_the_key(data: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_config(AgentTraceConfig, data)


def test_lognormal_clips_to_its_bounds() -> None:
    d = LogNormal(median=10.0, sigma=3.0, low=5.0, high=20.0)
    df = agent_trace(AgentTraceConfig(duration_s=300.0, tool_s=d, seed=5))
    for task in _tasks(df):
        gaps = np.diff(task["arrival_ms"].to_numpy()) / 1000.0
        out = task["output_tokens"].to_numpy()[:-1] * 0.03 + 0.5
        tool = gaps - out
        assert (tool >= 5.0 - 1e-6).all() and (tool <= 20.0 + 1e-6).all()


def test_a_fan_out_is_a_burst_of_calls_on_the_shared_context_then_one_join() -> None:
    c = AgentTraceConfig(duration_s=3000.0, tasks_per_s=0.05, fanout_p=1.0, fanout_calls=3,
                         mean_steps=2.0, max_steps=2, seed=6)  # fmt: skip
    df = agent_trace(c)
    bt, checked = c.block_tokens, 0
    for _, task in df.groupby("session"):
        if len(task) != 8:  # 2 steps, each fanning out: call, its 3 calls, join, its 3 calls
            continue
        rows = list(task.itertuples(index=False))
        first, branches, join = rows[0], rows[1:4], rows[4]
        full = first.input_tokens // bt
        done = first.arrival_ms + 1000.0 * (c.model_base_s + first.output_tokens * 0.03)
        own = []
        for b in branches:
            assert b.block_hashes[:full] == first.block_hashes[:full]  # the shared context
            assert b.arrival_ms >= done + 1000.0 * c.tool_s.low - 1e-6
            answered = b.arrival_ms + 1000.0 * (c.model_base_s + b.output_tokens * 0.03)
            assert join.arrival_ms >= answered - 1e-6  # the task waits for every answer
            own.append(set(b.block_hashes[(first.input_tokens + first.output_tokens) // bt :]))
        assert not own[0] & own[1] and not own[1] & own[2]  # each reads its own result
        assert join.block_hashes[:full] == first.block_hashes[:full]
        assert join.input_tokens > max(b.input_tokens for b in branches)
        checked += 1
    assert checked > 50


def test_without_fan_out_the_draws_are_unchanged() -> None:
    plain = agent_trace(SMALL)
    off = agent_trace(AgentTraceConfig(duration_s=600.0, tasks_per_s=0.3, seed=3, fanout_p=0.0,
                                       fanout_calls=8))  # fmt: skip
    pd.testing.assert_frame_equal(plain, off)
    assert len(agent_trace(AgentTraceConfig(duration_s=600.0, tasks_per_s=0.3, seed=3,
                                            fanout_p=0.5))) > len(plain)  # fmt: skip


def test_an_empty_trace_keeps_the_column_types() -> None:
    df = agent_trace(AgentTraceConfig(duration_s=0.01, tasks_per_s=0.01, seed=0))
    assert len(df) == 0
    assert (df["arrival_ms"].dtype, df["input_tokens"].dtype, df["output_tokens"].dtype) == (
        np.float64, np.int64, np.int64,
    )  # fmt: skip
