"""Property tests: whatever the probabilities (NaN, infinite, huge, negative; or scored by a real
ONNX model from feature values that are), whatever the cluster, the budgets and the tenants,
every command the decider issues respects every budget.

Each example runs up to three decisions at the same instant (nothing lands, no bucket
refills, no TTL passes, so every transfer issued stays in flight) and checks each command,
in the order issued, against an independent model of what the earlier ones committed:
per-node speculative quota (resident replicas + bytes in flight to the node), per-NIC and
global bandwidth buckets (a transfer starts only while its buckets are positive), transfers
in flight, the free-memory safety margin, tenant boundaries (only a public prefix crosses),
never the holder as a target, the source holding the whole chain, chains root-first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from decider_views import EveryChain, ScreensAgain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import FeatureSpec, build_spec
from kvcast.predictor.chains import build_plans, prefix_lengths
from kvcast.predictor.cluster_view import (
    ChainCandidates,
    ClusterView,
    Links,
    LowerTier,
    PrefillCost,
)
from kvcast.predictor.commands import (
    Command,
    DecisionReason,
    EvictCommand,
    PromoteCommand,
    ReplicateCommand,
)
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import GIB, DeciderConfig
from kvcast.predictor.model_meta import ModelMeta
from kvcast.predictor.scorer import OnnxScorer
from kvcast.predictor.targets import LoadForecast

onnx = pytest.importorskip("onnx")
BLOCK = 32 << 20
TENANTS = ("a", "b", "c")
NAN, INF = float("nan"), float("inf")
WILD = (NAN, INF, -INF, 1e300, -1e300, 1e-300, -0.0, 0.0, 1.0, 2.0, -1.0)


def wild_floats() -> st.SearchStrategy[float]:
    """Probabilities as a scorer might get them wrong."""
    return st.one_of(
        st.floats(0.0, 1.0), st.sampled_from(WILD), st.floats(allow_nan=True, allow_infinity=True)
    )


@dataclass(frozen=True)
class Case:
    cands: ChainCandidates
    view: ClusterView
    cfg: DeciderConfig


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A cluster, its candidates and a config; ``pick(usual, *edges)``: seven times in eight
    the usual value (or one of the usual ones, a tuple), else an edge (so that most examples
    can issue commands, and every edge is met often)."""

    def pick(usual: object, *edges: object) -> Any:
        if edges and draw(st.integers(0, 7)) == 0:
            return draw(st.sampled_from(edges))
        return draw(st.sampled_from(usual)) if isinstance(usual, tuple) else usual

    n = pick((2, 3, 4, 6), 1)
    chains: list[tuple[int, ...]] = []
    tenants: list[str] = []
    for i in range(draw(st.integers(1, 10))):
        tenant = pick(TENANTS)
        base = 1000 * (TENANTS.index(tenant) + 1)  # tenants never share a block hash
        mine = [c for c, t in zip(chains, tenants, strict=True) if t == tenant]
        head: tuple[int, ...] = ()
        if mine and draw(st.booleans()):  # a later turn: a prefix of an earlier chain, extended
            prev = pick(tuple(mine))
            head = prev[: draw(st.integers(1, len(prev)))]
        tail = tuple(base + 50 * i + j for j in range(draw(st.integers(0 if head else 1, 8))))
        chains.append(head + tail)
        tenants.append(tenant)
    blocks = sorted({b for c in chains for b in c})
    hbm: dict[int, int] = {}
    for c in chains:  # a home node holds the chain (or a prefix), others now and then
        home = pick(tuple(range(n)))
        for node in range(n):
            held = pick(len(c), 0, len(c) // 2) if node == home else pick(0, len(c), 1)
            for b in c[:held]:
                hbm[b] = hbm.get(b, 0) | (1 << node)
    k = len(chains)
    now = draw(st.floats(0.0, 1e7))
    cands = ChainCandidates.build(
        chains,
        tenants=tenants,
        public_blocks=[draw(st.integers(0, len(c))) for c in chains],
        first_use_ms=[
            pick((NAN, now + 500.0), now + 3e3, now - 10.0, now + 1e6, INF) for _ in chains
        ],
        tail_tokens=[pick((512, 0), 20_000, -100) for _ in range(k)],
        life_ms=[pick((NAN, 5_000.0), 0.0, 1e9, -1.0) for _ in range(k)],
    )
    cap = np.array([pick((400.0, 80.0), 8.0) for _ in range(n)]) * GIB
    pinned = cap * np.array([pick((0.1, 0.25, 0.5), 0.99, 1.0) for _ in range(n)])
    spec = (cap - pinned) * np.array([pick((0.0, 0.05), 0.3, 1.0) for _ in range(n)])
    cached = (cap - pinned - spec) * np.array([pick((0.0, 0.5, 0.9), 1.0) for _ in range(n)])
    bw = pick((1.1e7, 1e9), 1e6, 1e3)
    links = Links(
        np.full((n, n), bw) * np.array([draw(st.floats(0.5, 2.0)) for _ in range(n)]),
        np.full((n, n), pick((0.05, 0.01), 2.0)),
        np.array([[pick((0.0, 50.0), 5e3) for _ in range(n)] for _ in range(n)]),
        np.array([[pick((0, 1, 2), 3) for _ in range(n)] for _ in range(n)]),
    )
    lower: tuple[tuple[LowerTier, ...], ...] = ()
    if pick((False, True)):
        lower = tuple(
            ((set(draw(st.lists(st.sampled_from(blocks), max_size=20))), 25e6),)
            if draw(st.booleans())
            else ()
            for _ in range(n)
        )
    node_tenants: tuple[frozenset[str] | None, ...] = ()
    if pick((False, True)):
        node_tenants = tuple(
            pick((None, frozenset("a"), frozenset("b"), frozenset("bc"))) for _ in range(n)
        )
    evict = np.array([pick((0.0, 0.001), 0.1) for _ in range(n)]) if pick((False, True)) else None
    route = None
    if pick((False, True)):
        deepest = pick((True, False))

        def route(chain: tuple[int, ...], tokens: int, match: Sequence[int]) -> int:
            return int(np.argmax(match)) if deepest else 0

    view = ClusterView(
        now_ms=now,
        block_bytes=BLOCK,
        block_tokens=pick(512, 16),
        prefill=PrefillCost(20.0, 0.07, 7e-7),
        queue_ms=np.array([pick((0.0, 500.0, 2e3), 100.0, 9e3) for _ in range(n)]),
        capacity_bytes=cap,
        pinned_bytes=pinned,
        cached_bytes=cached,
        spec_bytes=spec,
        links=links,
        hbm=hbm,
        lower=lower,
        node_tenants=node_tenants,
        reactive_pull=pick((False, True)),
        would_route=route,
        evict_blocks_per_ms=evict,
    )
    budgets = {
        "speculative_quota_gib": pick(48.0, 0.0, 0.1, 1.0),
        "speculative_quota_fraction": pick((0.15, 1.0), 0.0, 0.01),
        "link_budget_gbps": pick((60.0, 1e4), 0.1, 1.0),
        "global_budget_gbps": pick((240.0, 1e5), 0.1, 2.0),
        "max_in_flight": pick((16, 5), 0, 1, 2),
    }
    cfg = DeciderConfig.model_validate(
        {
            "costs": {
                "safety_margin_gib": pick((4.0, 0.0, 1.0), 50.0),
                "min_p": pick((0.05, 0.0)),
                "max_cuts": pick((16, 2)),
            },
            "budgets": budgets,
            "targets": {
                "max_targets_per_chain": pick((1, 2, 3)),
                "max_chains_per_tick": pick((16, 4), 1),
            },
        }
    )
    return Case(cands, view, cfg)


class Ledger:
    """What the commands issued so far have committed (all still in flight)."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.pending: dict[int, int] = {}
        self.to: dict[int, float] = {}  # node -> bytes in flight to it
        self.out: dict[int, float] = {}
        self.into: dict[int, float] = {}
        self.total = 0.0
        self.count = 0

    def check(self, cmd: Command) -> None:
        view, b = self.case.view, self.case.cfg.budgets
        assert not isinstance(cmd, EvictCommand), "nothing expires at the same instant"
        assert self.count < b.max_in_flight, "transfers in flight"
        if isinstance(cmd, ReplicateCommand):
            chain, target, source = cmd.block_hashes, cmd.target, cmd.source
            assert source != target
            owners = [i for i, c in enumerate(self.case.cands.chains) if c[: len(chain)] == chain]
            assert chain and owners, "a copy is a candidate chain from its root"
            n = view.n
            assert prefix_lengths(chain, n, view.hbm, None)[source] == len(chain), "source holds it"
            start = prefix_lengths(chain, n, view.hbm, self.pending)[target]
            assert start < len(chain), "never the holder as a target"
            moved = chain[start:]
            assert not view.node_tenants or any(
                view.serves(target, self.case.cands.tenants[i])
                or len(chain) <= self.case.cands.public_blocks[i]
                for i in owners
            ), "only a public prefix crosses tenants"
            link, total = b.link_bytes(), b.global_bytes()
            assert self.out.get(source, 0.0) < link and self.into.get(target, 0.0) < link
            assert self.total < total, "global bandwidth"
        else:
            assert isinstance(cmd, PromoteCommand)
            target, moved = cmd.node, cmd.block_hashes
            assert moved and view.lower and view.lower[target]
            assert all(any(x in blocks for blocks, _ in view.lower[target]) for x in moved)
            assert any(
                moved == c[h : h + len(moved)]
                for c in self.case.cands.chains
                for h in [prefix_lengths(c, view.n, view.hbm, self.pending)[target]]
            ), "a promotion continues the node's prefix of a candidate chain"
        nbytes = float(len(moved) * view.block_bytes)
        assert isinstance(cmd.reason, DecisionReason) and cmd.reason.blocks_moved == len(moved)
        assert cmd.ttl_ms > 0
        quota = b.quota_bytes(float(view.capacity_bytes[target]))
        assert view.spec_bytes[target] + self.to.get(target, 0.0) + nbytes <= quota, "quota"
        room = (
            view.capacity_bytes[target]
            - view.pinned_bytes[target]
            - view.spec_bytes[target]
            - self.to.get(target, 0.0)
            - self.case.cfg.costs.safety_margin_gib * GIB
        )
        assert len(moved) <= room / view.block_bytes, "free-memory safety margin"
        self.count += 1
        self.to[target] = self.to.get(target, 0.0) + nbytes
        for x in moved:
            self.pending[x] = self.pending.get(x, 0) | (1 << target)
        if isinstance(cmd, ReplicateCommand):
            self.out[cmd.source] = self.out.get(cmd.source, 0.0) + nbytes
            self.into[target] = self.into.get(target, 0.0) + nbytes
            self.total += nbytes


def run_ticks(case: Case, probs: np.ndarray, ticks: int) -> int:
    decider, ledger, issued = Decider(case.cfg), Ledger(case), 0
    for _ in range(ticks):
        for cmd in decider.decide(case.cands, probs, case.view):
            ledger.check(cmd)
            issued += 1
    return issued


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data(), ticks=st.integers(1, 3))
def test_commands_respect_every_budget_whatever_the_probabilities(
    case: Case, data: st.DataObject, ticks: int
) -> None:
    n = case.cands.total_blocks
    probs = data.draw(st.lists(wild_floats(), min_size=n, max_size=n))
    run_ticks(case, np.array(probs, dtype=float), ticks)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), ticks=st.integers(1, 3))
def test_commands_respect_every_budget_when_every_chain_is_certain(case: Case, ticks: int) -> None:
    run_ticks(case, np.ones(case.cands.total_blocks), ticks)  # the most commands


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_holders_handed_in_decide_exactly_as_reading_the_view(case: Case) -> None:
    """The sidecar hands the decider each candidate block's GPU mask (read from the feature
    rows) instead of letting it look every block up in ``view.hbm``: the same commands."""
    probs = np.ones(case.cands.total_blocks)
    flat = [b for c in case.cands.chains for b in c]
    holders = np.array([case.view.hbm.get(b, 0) for b in flat], dtype=np.int64)
    looked_up = Decider(case.cfg).decide(case.cands, probs, case.view)
    assert Decider(case.cfg).decide(case.cands, probs, case.view, holders) == looked_up


def linear_model(path: Path, spec: FeatureSpec) -> Path:
    """A raw linear score over every feature, no imputation and no squashing: NaN, inf and
    huge features give NaN, inf and huge scores (the scorer maps non-finite ones to its
    fallback; huge ones pass through as probabilities far outside [0, 1])."""
    from onnx import TensorProto, helper, numpy_helper

    f = len(spec)
    w = np.linspace(-1.0, 1.0, f, dtype=np.float32).reshape(f, 1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["score"])],
        "linear",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", f])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", 1])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in ModelMeta(kind="linear-test", spec=spec, fallback=0.5).to_props().items():
        model.metadata_props.add(key=key, value=value)
    onnx.save_model(model, str(path))
    return path


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> OnnxScorer:
    spec = build_spec(FeatureConfig(nodes=4))
    return OnnxScorer.load(linear_model(tmp_path_factory.mktemp("m") / "m.onnx", spec))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), seed=st.integers(0, 2**32 - 1), ticks=st.integers(1, 3))
def test_commands_respect_every_budget_whatever_the_feature_values(
    scorer: OnnxScorer, case: Case, seed: int, ticks: int
) -> None:
    rng = np.random.default_rng(seed)
    shape = (case.cands.total_blocks, len(scorer.spec))
    rows = rng.normal(0.0, 1.0, shape) * 10.0 ** rng.integers(-3, 38, shape)  # to float32's max
    wild = rng.random(shape) < 0.2
    rows[wild] = rng.choice(np.array(WILD), int(wild.sum()))
    with np.errstate(over="ignore"):  # float64 beyond float32: inf, as a model sees it
        probs = scorer.score(rows)
    assert np.isfinite(probs).all()  # the scorer's own promise; the decider gets any range
    run_ticks(case, probs, ticks)


def test_the_checker_catches_a_quota_overrun() -> None:
    """The ledger above can fail: a command beyond the quota is refused by it."""
    chain = (1, 2, 3)
    view = ClusterView(
        now_ms=0.0, block_bytes=BLOCK, block_tokens=512, prefill=PrefillCost(20.0, 0.07, 7e-7),
        queue_ms=np.zeros(2), capacity_bytes=np.full(2, 80.0 * GIB), pinned_bytes=np.zeros(2),
        cached_bytes=np.zeros(2), spec_bytes=np.zeros(2),
        links=Links(np.full((2, 2), 1e7), np.full((2, 2), 0.05), np.zeros((2, 2)),
                    np.zeros((2, 2), dtype=np.int64)),
        hbm={b: 0b01 for b in chain},
    )  # fmt: skip
    cfg = DeciderConfig.model_validate({"budgets": {"speculative_quota_gib": 0.05}})
    case = Case(ChainCandidates.build([chain]), view, cfg)
    cmd = ReplicateCommand(0, 1, chain, 1.0, DecisionReason(1, 1, 0, 0, 0, 0, 0, 0, 3))
    with pytest.raises(AssertionError, match="quota"):
        Ledger(case).check(cmd)
    assert math.isclose(cfg.budgets.quota_bytes(80.0 * GIB), 0.05 * GIB)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data(), ticks=st.integers(1, 4), again=st.booleans())
def test_the_tick_screen_gives_the_commands_of_weighing_every_chain(
    case: Case, data: st.DataObject, ticks: int, again: bool
) -> None:
    """The decider rules out, as a tick starts, the chains it could not copy (no held prefix,
    a live replica, no holder queued above the least queued node, no target and cut whose
    net value could pay, told before or after their copy terms) and skips them until a
    command of the same tick moves something, then weighs them or screens them again (with
    the queues, the replicas and the bytes in flight as the commands left them): the same
    commands as weighing every chain, tick after tick (the ledger kept, so later ticks see
    copies on their way), whenever the screens are made again (``again``: after every
    command)."""
    n = case.cands.total_blocks
    probs = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    screened = (ScreensAgain if again else Decider)(case.cfg)
    every = EveryChain(case.cfg)
    for _ in range(ticks):
        assert screened.decide(case.cands, probs, case.view) == every.decide(
            case.cands, probs, case.view
        )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_every_chains_queue_without_it_at_once_equals_one_by_one(
    case: Case, data: st.DataObject
) -> None:
    """The screen's predicted queues (all chains at once, numpy) are bit for bit those each
    chain's own check reads (one by one, Python floats)."""
    n = case.cands.total_blocks
    probs = np.array(data.draw(st.lists(wild_floats(), min_size=n, max_size=n)))
    cfg = case.cfg
    plans = build_plans(
        case.cands, probs, case.view, {}, window_ms=cfg.window_ms, min_p=cfg.costs.min_p
    )
    forecast = LoadForecast(case.view, plans, cfg.targets, cfg.window_ms)
    rows = np.arange(len(plans))
    at_once = forecast.queues_without(rows).tolist()
    one_by_one = [forecast.queue_without(plan) for plan in plans.plans(rows)]
    assert repr(at_once) == repr(one_by_one)  # (repr: NaN equals NaN, -0.0 differs from 0.0)
