"""Commands keep their original fields and positional order; the new ones have defaults."""

from __future__ import annotations

from kvcast.predictor.commands import (
    DecisionReason,
    EvictCommand,
    PromoteCommand,
    ReplicateCommand,
)


def test_replicate_command_positional_order_is_unchanged() -> None:
    cmd = ReplicateCommand(0, 1, (1, 2), 500.0, "why")
    assert (cmd.source, cmd.target, cmd.block_hashes, cmd.ttl_ms, cmd.reason) == (
        0,
        1,
        (1, 2),
        500.0,
        "why",
    )
    assert cmd.priority == 0 and cmd.deadline_ms is None


def test_promote_and_evict_commands_keep_their_fields() -> None:
    assert PromoteCommand(3, (1,), 10.0).reason == ""
    assert EvictCommand(2, (5, 6)).block_hashes == (5, 6)


def test_a_reason_sums_its_cost_terms_and_reads_as_one_line() -> None:
    r = DecisionReason(0.5, 100.0, 10.0, 5.0, 3.0, 2.0, 400.0, 50.0, 4)
    assert r.benefit_ms == 50.0 and r.cost_ms == 20.0 and r.net_ms == 30.0
    assert "\n" not in str(r) and "saved=100.0" in str(r)
