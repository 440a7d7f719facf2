"""Policies x loads x SLOs (x speculative budgets) on one trace: the table every comparison is
made from.

One *task* is a policy under one SLO and, for a replicating policy, one speculative quota: its
capacity search (when asked) and one simulation per load. Tasks are independent and
deterministic, so they may run in parallel processes (``jobs``); the result is the same as a
sequential run, in the order asked.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kvcast.config import with_overrides
from kvcast.features.traces.table import Trace
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.capacity import CapacityResult, find_capacity
from kvcast.simulator.config import SimConfig, SLOConfig
from kvcast.simulator.engine import simulate
from kvcast.simulator.load import LoadOutOfRange, check_load, load_scaled
from kvcast.simulator.replication_policies import is_replicating, make_policy

Step = Callable[[str], None]
"""Called with a short label each time one simulation finishes."""

PARENT_POLL_S = 1.0  # how often a worker looks whether the evaluation that started it lives


def _watch_parent(parent: int) -> None:
    """Worker initializer: exit as soon as the parent process is gone, so that a killed
    evaluation (SIGTERM or SIGKILL from a scheduler, not only Ctrl-C) leaves no worker
    computing on (a process whose parent died is re-parented, so its parent id changes)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="kvcast-parent-watch", daemon=True).start()


def _init_worker(parent: int) -> None:
    """Worker initializer: leave Ctrl-C to the evaluation, which stops every worker (a worker
    interrupted on its own printed a traceback), and exit with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(parent)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """End ``pool``'s workers and drop its queued tasks without waiting: an interrupted
    evaluation waited for the simulations under way, which nothing would read."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Evaluation:
    summaries: list[dict[str, Any]] = field(default_factory=list)
    """One summary per (policy, SLO, budget, time_scale), in the order asked."""
    ttft: dict[tuple[str, float], pd.Series] = field(default_factory=dict)
    """TTFT of served requests per (label, time_scale), for the CDF plot."""
    capacity: dict[str, CapacityResult] = field(default_factory=dict)
    """Per label (the policy name, plus its SLO / budget when several were asked)."""


@dataclass(frozen=True)
class Task:
    policy: str
    label: str
    cfg: SimConfig
    decider: DeciderConfig | None
    extra: tuple[tuple[str, Any], ...] = ()  # keys added to each summary (slo_label, quota)


@dataclass
class TaskResult:
    summaries: list[dict[str, Any]]
    ttft: dict[float, pd.Series]
    capacity: CapacityResult | None


TaskKey = tuple[str, Any, Any]
"""(policy, SLO label, speculative quota in GiB), None where the evaluation did not sweep it."""


def task_key(s: Mapping[str, Any]) -> TaskKey:
    """The task a summary row belongs to."""
    return s["policy"], s.get("slo_label"), s.get("speculative_quota_gib")


def task_label(policy: str, slo: str | None = None, quota: float | None = None) -> str:
    """A task as tables, plots and the verdict name it: ``oracle [absolute 2000 ms] [8 GiB]``."""
    return (
        policy
        + (f" [{slo}]" if slo is not None else "")
        + (f" [{quota:g} GiB]" if quota is not None else "")
    )


def slo_label(slo: SLOConfig) -> str:
    if slo.mode == "absolute":
        return f"absolute {slo.ttft_ms:g} ms"
    return f"length-aware {slo.floor_ms:g} ms + {slo.factor:g}x"


def plan_tasks(
    cfg: SimConfig,
    policies: Sequence[str],
    decider: DeciderConfig | None,
    slos: Sequence[SLOConfig] | None,
    quotas_gib: Sequence[float] | None,
) -> list[Task]:
    """Every (policy, SLO, quota) task; quotas apply to replicating policies only."""
    shown = [f"{q:g}" for q in quotas_gib or ()]
    if len(set(shown)) != len(shown):  # results and plots are keyed by these labels
        raise ValueError(
            f"speculative quotas {list(quotas_gib or ())} read the same at 6 significant "
            f"digits ({', '.join(shown)}): give distinct values"
        )
    slo_list = list(slos) if slos else [cfg.slo]
    tasks = []
    base = decider if decider is not None else DeciderConfig()
    for name in policies:
        replicating = is_replicating(name)
        for slo in slo_list:
            c = with_overrides(cfg, slo=slo.model_dump()) if slos else cfg
            slo_part = [("slo_label", slo_label(slo))] if len(slo_list) > 1 else []
            quota_list = list(quotas_gib) if quotas_gib and replicating else [None]
            for q in quota_list:
                d = decider
                quota_part: list[tuple[str, Any]] = []
                if q is not None:
                    budgets = base.budgets.model_copy(update={"speculative_quota_gib": q})
                    d = base.model_copy(update={"budgets": budgets})
                    quota_part = [("speculative_quota_gib", q)]
                label = task_label(name, dict(slo_part).get("slo_label"), q)
                tasks.append(Task(name, label, c, d, (*slo_part, *quota_part)))
    return tasks


def run_task(
    trace: Trace,
    task: Task,
    time_scales: Sequence[float],
    capacity: bool,
    models: Mapping[str, str] | None,
    on_step: Step | None = None,
) -> TaskResult:
    name, cfg, decider = task.policy, task.cfg, task.decider
    cap = None
    if capacity:
        refusals: dict[float, str] = {}

        def attainment(x: float) -> float | None:
            try:
                res = simulate(trace, cfg, make_policy(name, cfg, decider, models), time_scale=x)
            except LoadOutOfRange as err:  # too low / high a load for this trace: an edge
                refusals[x] = str(err)
                return None
            if on_step is not None:
                on_step(f"{task.label} capacity probe x{x:.3g}")
            return float(res.summary["slo_attainment"])

        cap = find_capacity(attainment, target=cfg.slo.target_attainment, refused=refusals.get)
    summaries, ttft = [], {}
    for x in time_scales:
        res = simulate(trace, cfg, make_policy(name, cfg, decider, models), time_scale=x)
        s = res.summary | dict(task.extra)
        if cap is not None:
            s |= capacity_keys(cap)
        summaries.append(s)
        ttft[x] = res.requests.loc[~res.requests["rejected"], "ttft_ms"].reset_index(drop=True)
        if on_step is not None:
            on_step(f"{task.label} x{x:g}")
    return TaskResult(summaries, ttft, cap)


def capacity_keys(cap: CapacityResult) -> dict[str, Any]:
    """The summary keys of a capacity search: ``capacity_time_scale`` (DESIGN.md), and
    ``capacity_bound`` ("upper": the SLO was still met at the search's highest load, so the
    capacity is at least that; "lower": met at no load down to ``capacity_bound_time_scale``;
    None: bracketed) with ``capacity_bound_time_scale`` (the edge's load, or None)."""
    return {
        "capacity_time_scale": cap.time_scale,
        "capacity_bound": cap.bound,
        "capacity_bound_time_scale": cap.bound_time_scale,
    }


def check_inputs(
    trace: Trace,
    cfg: SimConfig,
    policies: Sequence[str],
    time_scales: Sequence[float],
    slos: Sequence[SLOConfig] | None,
) -> None:
    """Refuse, before any simulation, what would end an evaluation in a traceback or in
    NaN metrics: a one-line ValueError naming the value."""
    if not len(trace):
        raise ValueError(f"trace {trace.name!r} has no requests to evaluate")
    for what, values in (
        ("policies", list(policies)),
        ("time-scales", [float(x) for x in time_scales]),
        ("SLOs", [slo_label(s) for s in slos or ()]),
    ):
        seen: set[Any] = set()
        for v in values:
            if v in seen:
                raise ValueError(f"{what}: {v!r} is given twice")
            seen.add(v)
    for x in time_scales:
        check_load(trace, x, cfg)
        forced_spread = cfg.arrival_spread not in ("auto", "off")  # may stretch the trace
        if forced_spread or (cfg.load_scaling == "sessions" and x < 1):
            load_scaled(trace, x, cfg)  # thinned: refused if it draws no session


def evaluate(
    trace: Trace,
    cfg: SimConfig,
    policies: Sequence[str],
    time_scales: Sequence[float] = (1.0,),
    *,
    capacity: bool = False,
    on_step: Step | None = None,
    decider: DeciderConfig | None = None,
    models: Mapping[str, str] | None = None,
    slos: Sequence[SLOConfig] | None = None,
    quotas_gib: Sequence[float] | None = None,
    jobs: int = 1,
) -> Evaluation:
    """Run every policy at every time-scale (and its capacity search when asked), under each
    SLO of ``slos`` (default: ``cfg.slo``) and, for the replicating policies, each speculative
    quota of ``quotas_gib`` (default: the decider's).

    Replicating policies (``oracle``, ``predictive_*``) use ``decider`` (default: the
    embedded decider config) and the model policies ``models`` (kind -> ONNX path or MLflow
    URI); each simulation gets a fresh policy. ``jobs`` > 1 runs tasks in that many worker
    processes (``on_step`` is then called as each task finishes)."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    check_inputs(trace, cfg, policies, time_scales, slos)
    for name in policies:  # fail fast on a bad name or model, before any work
        make_policy(name, cfg, decider, models)
    tasks = plan_tasks(cfg, policies, decider, slos, quotas_gib)
    results: dict[int, TaskResult] = {}
    if jobs == 1 or len(tasks) == 1:
        for i, task in enumerate(tasks):
            results[i] = run_task(trace, task, time_scales, capacity, models, on_step)
    else:
        ctx = multiprocessing.get_context("spawn")  # no fork of threads (onnxruntime, BLAS)
        pool = ProcessPoolExecutor(
            min(jobs, len(tasks)), mp_context=ctx, initializer=_init_worker,
            initargs=(os.getpid(),),
        )  # fmt: skip
        try:
            futures = {
                pool.submit(run_task, trace, task, time_scales, capacity, models): i
                for i, task in enumerate(tasks)
            }
            for fut in as_completed(futures):
                i = futures[fut]
                results[i] = fut.result()
                if on_step is not None:
                    for x in time_scales:
                        on_step(f"{tasks[i].label} x{x:g}")
        except BaseException:  # Ctrl-C, or a task's error: the other tasks are not wanted
            _stop_now(pool)
            raise
        pool.shutdown()
    out = Evaluation()
    for i, task in enumerate(tasks):
        r = results[i]
        out.summaries.extend(r.summaries)
        for x, series in r.ttft.items():
            out.ttft[(task.label, x)] = series
        if r.capacity is not None:
            out.capacity[task.label] = r.capacity
    return out


def with_loads(ev: Evaluation, extra: Evaluation) -> Evaluation:
    """``ev`` with ``extra``'s runs of the same tasks at other loads: each task's rows in load
    order, its capacity (searched in ``ev`` only) on every row."""
    cap = {task_key(s): {k: s[k] for k in s if k.startswith("capacity_")} for s in ev.summaries}
    rows: dict[TaskKey, list[dict[str, Any]]] = {}
    for s in ev.summaries:
        rows.setdefault(task_key(s), []).append(s)
    for s in extra.summaries:
        rows.setdefault(task_key(s), []).append(s | cap.get(task_key(s), {}))
    out = Evaluation(capacity=dict(ev.capacity), ttft=ev.ttft | extra.ttft)
    for group in rows.values():
        out.summaries.extend(sorted(group, key=lambda s: s["time_scale"]))
    return out


def count_steps(
    policies: Sequence[str],
    time_scales: Sequence[float],
    slos: int = 1,
    quotas: int = 1,
) -> int:
    """Simulations an evaluation runs, not counting capacity probes (unknown in advance)."""
    replicating = sum(is_replicating(n) for n in policies)
    tasks = (len(policies) - replicating + replicating * max(quotas, 1)) * max(slos, 1)
    return tasks * len(time_scales)
