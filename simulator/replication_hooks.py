"""The simulator's side of the replication hook: tick the replicator, carry out its commands.

:class:`ReplicationHooks` is mixed into :class:`~kvcast.simulator.engine.Simulator`. Every
``tick_ms`` of simulated time it lets expired speculative blocks go, asks the
:class:`~kvcast.simulator.replication.Replicator` (the policy's half of the hook) for commands
and executes them under the cluster's physics: a replication pins its source blocks and takes
its turn on the link, a promotion loads lower-tier blocks at the tier's bandwidth, an eviction
drops speculative blocks at once; what arrives lands as speculative blocks under the node's
quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvcast.features.events import ReplicationDone
from kvcast.predictor.commands import Command, EvictCommand, PromoteCommand, ReplicateCommand
from kvcast.simulator.event_kinds import PROMOTE, REPL, TICK
from kvcast.simulator.load import MAX_TELEMETRY_PERIODS

if TYPE_CHECKING:
    from kvcast.simulator.block_pool import BlockPool
    from kvcast.simulator.engine import Simulator


class ReplicationHooks:
    """The replicator's tick and its commands, as methods of the :class:`Simulator` (the
    counters they keep, ``replication``, ``_placed`` and ``speculative_peak_over_quota``, are
    the simulator's, read by :class:`~kvcast.simulator.metrics.SimResult`)."""

    def _tick(self: Simulator) -> None:
        rep = self.replicator
        assert rep is not None
        for pool in (n.pool for n in self.nodes):
            pool.expire(self.now)
        self.execute(rep.on_tick(self.now, self))
        if self._work_left():
            if self.now - self._last_arrival > MAX_TELEMETRY_PERIODS * rep.tick_ms:
                raise self.overran(f"the decider's {MAX_TELEMETRY_PERIODS:,} ticks of "
                                   f"{rep.tick_ms:g} ms (loop.tick_ms)")  # fmt: skip
            self._push(self.now + rep.tick_ms, TICK, None)

    def execute(self: Simulator, commands: Iterable[Command]) -> None:
        """Carry out replication commands now (transfers complete later)."""
        for cmd in commands:
            if isinstance(cmd, ReplicateCommand):
                self._replicate(cmd)
            elif isinstance(cmd, PromoteCommand):
                self._promote(cmd)
            elif isinstance(cmd, EvictCommand):
                self.nodes[cmd.node].pool.drop_speculative(cmd.block_hashes)

    def _replicate(self: Simulator, cmd: ReplicateCommand) -> None:
        src = self.nodes[cmd.source].pool
        dst = self.nodes[cmd.target].pool
        chain: list[int] = []
        for b in cmd.block_hashes:  # a chain is useful only up to its first missing block
            if not src.in_hbm(b):
                break
            chain.append(b)
        moved = [b for b in chain if not dst.in_hbm(b)]
        if not moved:
            return
        src.pin_source(moved)  # read, not used: a replica read here stays speculative
        done = self.network.reserve(cmd.source, cmd.target, len(moved) * self.block_bytes, self.now)
        self.replication["replications"] += 1
        self.replication["blocks_moved"] += len(moved)
        self._push(done, REPL, (cmd, moved))

    def _replication_done(self: Simulator, payload: tuple[ReplicateCommand, list[int]]) -> None:
        cmd, moved = payload
        self.nodes[cmd.source].pool.release_source(moved)
        dst = self.nodes[cmd.target].pool
        placed = dst.add_speculative(moved, self.now, cmd.ttl_ms, cmd.deadline_ms)
        self._placed += len(placed)
        self._note_quota(dst)
        if self.observers:
            self._stored(cmd.target, placed, speculative=True)
            self._emit(
                ReplicationDone(
                    self.now, cmd.source, cmd.target, tuple(placed), len(placed) == len(moved)
                )
            )

    def _promote(self: Simulator, cmd: PromoteCommand) -> None:
        """Start loading lower-tier blocks into HBM; they land as speculative when loaded."""
        node = self.nodes[cmd.node]
        pool = node.pool
        dram_bw, nvme_bw, shared_bw = node.tier_bytes_per_ms
        ms = 0.0
        lower = []
        for b in cmd.block_hashes:
            bw = (
                dram_bw
                if b in pool.dram
                else nvme_bw
                if b in pool.nvme
                else shared_bw
                if b in pool.shared
                else 0.0
            )
            if bw:
                lower.append(b)
                ms += self.block_bytes / bw
        if lower:
            self._push(self.now + ms, PROMOTE, (cmd, lower))

    def _promote_done(self: Simulator, payload: tuple[PromoteCommand, list[int]]) -> None:
        cmd, lower = payload
        pool = self.nodes[cmd.node].pool
        still = [b for b in lower if b in pool.dram or b in pool.nvme or b in pool.shared]
        # each block placed leaves its lower tier there; one the quota or a full HBM stops
        # stays where it was
        placed = pool.add_speculative(still, self.now, cmd.ttl_ms, cmd.deadline_ms, promoted=True)
        self._placed += len(placed)
        self._note_quota(pool)

    def _note_quota(self: Simulator, pool: BlockPool) -> None:
        over = (len(pool.spec) - pool.spec_quota) * self.block_bytes
        self.speculative_peak_over_quota = max(self.speculative_peak_over_quota, over)
