"""The cost-function decider: burst probabilities in, replication commands out.

Each call (one decision tick) takes candidate prefix chains with a probability per block
(from any scorer, the oracle included) and a :class:`~kvcast.predictor.cluster_view.ClusterView`,
and returns:

1. :class:`EvictCommand` for replicas it placed whose TTL has passed;
2. :class:`ReplicateCommand` / :class:`PromoteCommand` for the chains that pay off, most
   valuable first. Chains are taken in order of recompute cost x P x expected life (object
   choice); for each, every admissible target node is weighed by the inequality of
   :mod:`kvcast.predictor.costs` (hit benefit, target queue and predicted queue, link tier,
   free memory), always root-first from the first block the target lacks, and the best
   action is taken if its net value is positive, every gate holds and every budget of
   :mod:`kvcast.predictor.budgets` admits it. A node predicted hot
   (:mod:`kvcast.predictor.targets`) is never a target, and a chain never crosses tenants
   beyond its public prefix.

The decider keeps only its ledger between calls; it never reads a simulator, so the live
sidecar can drive it from the same plain data.

Cost: numpy over all candidates at once for the plans, the load forecast and the object
choice (:func:`~kvcast.predictor.chains.build_plans`), and over the chains weighed x target
nodes x cuts for every term that the tick's own decisions do not change
(:mod:`kvcast.predictor.copy_terms`). What they do change (predicted queues, hot nodes,
bytes in flight, free HBM and room, copies on their way) is per-node state kept as plain
Python lists and updated in place after each commit (numpy is slower than Python on vectors
as short as a cluster's node count), and applied chain by chain in priority order, so each
decision sees the ones before it and the budgets are applied greedily, as a plain loop
would. Each chain weighed then costs one short numpy pass over its targets x cuts (about
fifteen calls, :func:`~kvcast.predictor.costs.replication_option`), whose values, ties and
their order included, are those of the arithmetic term by term.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from kvcast.predictor.budgets import BudgetLedger, Transfer
from kvcast.predictor.chains import ChainPlan, PlanBatch, build_plans, prefix_lengths
from kvcast.predictor.cluster_view import ChainCandidates, ClusterView
from kvcast.predictor.commands import Command, EvictCommand, PromoteCommand, ReplicateCommand
from kvcast.predictor.copy_terms import CopyTerms, TickTerms, copy_terms
from kvcast.predictor.costs import Option, replication_option
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.predictor.outcome_feedback import OutcomeFeedback
from kvcast.predictor.promotion import promotion_option
from kvcast.predictor.targets import LoadForecast
from kvcast.predictor.tick_screens import ScreenInputs, TickScreens, admitted_chains

DEFAULT = DeciderConfig()  # frozen: one instance serves every decider built without a config


class Decider(TickScreens):
    def __init__(self, cfg: DeciderConfig | None = None, claim_in_flight: bool = False) -> None:
        """``claim_in_flight``: a routed request also claims the replicas still on their way
        to its node (the live sidecar, whose agents hold such a replica for the request once
        it lands); the simulator's requests read only what has landed, so it leaves them."""
        self.cfg = cfg if cfg is not None else DEFAULT
        self.claim_in_flight = claim_in_flight
        self.ledger = BudgetLedger(self.cfg.budgets)
        self.feedback = OutcomeFeedback(self.cfg.feedback)  # are the copies used as expected?
        self.refused: Counter[str] = Counter()  # budget refusals by budget name

    def observe_arrival(self, node: int, blocks: Sequence[int], now_ms: float) -> None:
        """A request was routed to ``node``: settles whether the copies it reads were used
        where they were made (see :mod:`kvcast.predictor.outcome_feedback`), and hands the
        replicas of its blocks that landed on ``node`` over to it (claimed: the node holds
        them until the request reads them; the ledger orders no eviction of them, and counts
        them as their chains' copies until their TTL, see :meth:`BudgetLedger.claim`)."""
        self.ledger.claim(node, blocks, now_ms, self.claim_in_flight)
        self.feedback.observe(node, blocks, now_ms)

    def observe_arrivals(self, routed: Iterable[tuple[float, int, Sequence[int]]]) -> None:
        """:meth:`observe_arrival` of each ``(now_ms, node, blocks)`` in order; nothing to do
        (no Python step per request) while the ledger holds no unclaimed replica and no copy's
        outcome is awaited, as in a tick that follows no copy."""
        if not self.ledger.unclaimed and not self.feedback.watching:
            return
        for now_ms, node, blocks in routed:
            self.observe_arrival(node, blocks, now_ms)

    def forget(self, node: int, blocks: Sequence[int]) -> None:
        """Copies of ``blocks`` on ``node`` are gone before their TTL (the replication failed,
        or the node evicted them): the ledger no longer counts them as live, so the chain may
        be copied again, and their outcome is not learnt from."""
        self.ledger.forget(node, blocks)
        self.feedback.forget(node, blocks)

    def decide(
        self,
        cands: ChainCandidates,
        probs: np.ndarray,
        view: ClusterView,
        holders: np.ndarray | None = None,
    ) -> list[Command]:
        """The tick's commands. ``probs``: per block of the concatenated chains; ``holders``
        (optional): per such block, its ``view.hbm`` bitmask, when the caller has them at
        hand (else read from ``view.hbm``)."""
        now = view.now_ms
        ledger = self.ledger
        ledger.settle(now)
        self.feedback.expire(now)
        out: list[Command] = [
            EvictCommand(node, tuple(blocks), "ttl expired")
            for node, blocks in sorted(ledger.expired(now).items())
        ]
        if not len(cands):
            return out
        cfg = self.cfg
        # a chain with a known first use is looked at once its copy could land within lead_ms
        # of that use (the replica itself must land no earlier than that, see costs.py)
        ms_per_block = _ms_per_block(view)
        lead = cfg.costs.lead_ms + float(np.max(view.links.backlog_ms, initial=0.0))
        longest = int(cands.lengths.max(initial=0))
        plans = build_plans(
            cands,
            probs,
            view,
            ledger.pending,
            window_ms=cfg.window_ms,
            min_p=cfg.costs.min_p,
            known_within_ms=max(cfg.targets.horizon_ms, lead + longest * ms_per_block),
            holders=holders,
        )
        forecast = LoadForecast(view, plans, cfg.targets, cfg.window_ms)
        with np.errstate(invalid="ignore"):
            ready = ~plans.known | (plans.time_left_ms <= lead + plans.lens * ms_per_block)
        rows = np.flatnonzero(ready)
        order = rows[np.argsort(-plans.priority(view)[rows], kind="stable")]
        order = order[: cfg.targets.max_chains_per_tick]
        chains = [plans.cands.chains[c] for c in plans.index[order].tolist()]
        # the copy terms, for the chains that may be copied as the tick starts; one that
        # may be once the tick's own commands moved the queues gets its terms then, alone
        queues = forecast.queues_without(order)  # as the tick starts (read by both screens)
        batched = self._may_copy(plans, order, chains, queues)
        factor = self.feedback.factor(now)  # (every tick: it decays the outcomes to now)
        promote = cfg.promote and bool(view.lower)
        if batched and not promote:  # (a promotion weighs every chain: its terms are made)
            batched = self._may_pay(plans, order, batched, chains, queues, view, factor)
        if not batched and not promote:
            return out  # no chain may be copied as the tick starts, so none is (nothing moves)
        terms = TickTerms.of(view, cfg, factor)
        # the other chains' plans are made once one of them is weighed (in most ticks none)
        firsts = plans.plans(order[batched])
        weighed: list[ChainPlan | None] = [None] * len(order)
        for i, made in zip(batched, firsts, strict=True):
            weighed[i] = made
        row = dict(zip(batched, range(len(batched)), strict=True))
        copies = self._copy_terms(plans, order[batched], firsts, view, terms)
        rank = screened = 0  # commands so far; their number when the screens were made
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            # and of those, the ones no target and cut could pay for as the tick starts
            unpaid = self._cannot_pay(queues[batched], firsts, copies, view, forecast, terms)
            admitted = admitted_chains(len(order), batched, row, unpaid)
            tick = ScreenInputs(plans, order, chains, view, forecast, factor, firsts, copies, terms)
            for i, kept in enumerate(weighed):
                j = row.get(i)  # its row of the batched copy terms (None: not batched)
                if not promote and not admitted[i]:  # (a promotion weighs every chain)
                    if rank > screened and admitted[i:].count(False) >= self.RESCREEN_AT:
                        # a command moved something since the screens: made again, for what
                        # is left (cheaper than weighing each chain they ruled out)
                        admitted, screened = self._screens_again(tick, batched, row), rank
                    if rank == screened and not admitted[i]:
                        continue  # ruled out, and nothing moved since
                if kept is None:  # the first chain weighed beyond those: make every plan
                    missing = [x for x, made in enumerate(weighed) if made is None]
                    for x, made in zip(missing, plans.plans(order[missing]), strict=True):
                        weighed[x] = made
                plan = weighed[i]
                assert plan is not None
                for _ in range(cfg.targets.max_targets_per_chain):
                    copy = None if copies is None or j is None else (copies, j)
                    real = plan.held
                    if self._touched(plan.blocks):  # a copy of some blocks is on its way
                        plan.held = prefix_lengths(plan.blocks, view.n, view.hbm, ledger.pending)
                        real = prefix_lengths(plan.blocks, view.n, view.hbm, None)
                        if copy is not None and not _placed_as(*copy, plan.held, real):
                            copy = None
                    opt = self._best_option(plan, view, forecast, real, terms, copy)
                    if opt is None:
                        break
                    cmd = self._commit(opt, plan, view, forecast, terms, priority=rank)
                    if cmd is None:
                        break
                    out.append(cmd)
                    rank += 1
        return out

    def _copy_terms(
        self,
        plans: PlanBatch,
        rows: np.ndarray,
        weighed: list[ChainPlan],
        view: ClusterView,
        terms: TickTerms,
    ) -> CopyTerms | None:
        """The copy terms of the chains ``weighed`` (``rows`` of ``plans``), as placed now
        (None: no chain)."""
        if not weighed:
            return None
        n, hbm = view.n, view.hbm
        held = plans.held[rows]
        real = held.copy()
        for i, p in enumerate(weighed):
            if self._touched(p.blocks):
                real[i] = prefix_lengths(p.blocks, n, hbm, None)
        cands, index = plans.cands, plans.index[rows]
        public = cands.public_blocks[index] if len(cands.public_blocks) else np.zeros(len(rows))
        return copy_terms(
            view,
            self.cfg,
            terms,
            held=held,
            real=real,
            p=plans.p[rows],
            lens=plans.lens[rows],
            tail_tokens=plans.tail_tokens[rows],
            tenants=[p.tenant for p in weighed],
            public_blocks=public,
            time_left_ms=plans.time_left_ms[rows],
            known=plans.known[rows],
        )

    # -- choice ------------------------------------------------------------------------------
    def _best_option(
        self,
        plan: ChainPlan,
        view: ClusterView,
        forecast: LoadForecast,
        real: list[int],
        terms: TickTerms,
        copy: tuple[CopyTerms, int] | None,
    ) -> Option | None:
        cfg = self.cfg
        ledger = self.ledger
        depth = max(real)
        if depth and ledger.has_replica(plan.blocks[depth - 1]):
            return None  # one live speculative copy per chain: a second is noise-chasing
        queue = forecast.queue_without(plan)
        hot = forecast.hot()
        in_flight = ledger.in_flight_to(view.n)
        best = None
        if depth and self._worth_a_look(plan, queue, depth):
            best = replication_option(
                plan,
                view,
                cfg,
                real=real,
                queue=queue,
                hot=hot,
                in_flight_bytes=in_flight,
                terms=terms,
                copy=copy,
            )
        if cfg.promote and view.lower:
            for n in range(view.n):
                if hot[n] or not view.serves(n, plan.tenant):
                    continue
                opt = promotion_option(
                    plan, view, cfg, node=n, queue=queue, in_flight_bytes=float(in_flight[n])
                )
                if opt is not None and (best is None or opt.net_ms > best.net_ms):
                    best = opt
        return best

    def _worth_a_look(self, plan: ChainPlan, queue: list[float], depth: int) -> bool:
        """Cheap pre-check: some holder of the prefix is more queued than the least queued
        node (else no queue can be saved). Kept under a route probe too, although there the
        inequality also credits a copy to the node the router would pick now with that node's
        recompute: the router picks again when the request comes, and those copies went unused
        (skipping the check for them made the oracle's P50 TTFT 10% worse and the recency
        policy's 7% on the bundled trace under ``dynamo_kv``, 2026-12-03)."""
        return max(x for x, h in zip(queue, plan.held, strict=True) if h >= depth) > min(queue)

    # -- commitment ---------------------------------------------------------------------------
    def _commit(
        self,
        opt: Option,
        plan: ChainPlan,
        view: ClusterView,
        forecast: LoadForecast,
        terms: TickTerms,
        priority: int,
    ) -> Command | None:
        cfg = self.cfg
        moved = plan.blocks[opt.start : opt.end]
        if opt.source != opt.target:  # what the target lacks: it may hold blocks past a gap
            bit, hbm, pending = 1 << opt.target, view.hbm, self.ledger.pending
            moved = tuple(b for b in moved if not (hbm.get(b, 0) | pending.get(b, 0)) & bit)
        nbytes = len(moved) * view.block_bytes
        refusal = self.ledger.refusal(opt.source, opt.target, nbytes, terms.quota_room[opt.target])
        if refusal is not None:
            self.refused[refusal] += 1
            return None
        now = view.now_ms
        ttl = cfg.budgets.ttl_ms
        if plan.known_first_use:
            ttl = min(ttl, plan.time_left_ms + cfg.budgets.ttl_slack_ms)
        deadline = now + plan.time_left_ms
        t = Transfer(now, now + opt.transfer_ms, opt.source, opt.target, nbytes, moved)
        self.ledger.record(t, now + ttl)
        if opt.source != opt.target:  # a replication (promotions are not corrected)
            p = opt.reason.p_hit if opt.p_model is None else opt.p_model  # before correction
            deepest = opt.end - 1
            self.feedback.watch(plan.blocks[deepest], opt.target, now + ttl, p, opt.source, deepest)
        plan.held[opt.target] = opt.end
        forecast.move(plan, opt.target)
        chain = plan.blocks[: opt.end]
        tenant = plan.tenant
        if opt.source == opt.target:
            return PromoteCommand(opt.target, moved, ttl, opt.reason, priority, deadline, tenant)
        return ReplicateCommand(
            opt.source, opt.target, chain, ttl, opt.reason, priority, deadline, tenant
        )


def _placed_as(copies: CopyTerms, i: int, held: list[int], real: list[int]) -> bool:
    """Whether chain ``i``'s copy terms were computed for this placement."""
    return copies.start[i].tolist() == held and copies.real[i].tolist() == real


def _ms_per_block(view: ClusterView) -> float:
    """One block's time on the slowest usable link (inf if none): a link of no or unknown
    speed (a down link, a node's own diagonal) carries no copy, and its terms pass no gate."""
    bw = view.links.bytes_per_ms
    usable = bw[(bw > 0) & np.isfinite(bw)]
    return view.block_bytes / float(usable.min()) if usable.size else math.inf
