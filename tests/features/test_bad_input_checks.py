"""Which events are bad input (shared by both paths) and what the counters name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from kvcast.features.counters import BAD_INPUT, BadInputCounters
from kvcast.features.events import BlockRemoved, ReplicationDone, RequestArrived, TelemetrySample
from kvcast.features.validate import check, unique_blocks

NAN = float("nan")


def test_a_good_request_passes(make_request: Callable[..., RequestArrived]) -> None:
    assert check(make_request(1.0, [1, 2]), nodes=4) is None


@pytest.mark.parametrize(
    "change",
    [{"ts_ms": NAN}, {"ts_ms": -1.0}, {"ts_ms": float("inf")}, {"input_tokens": -5},
     {"public_blocks": -1}, {"input_tokens": None}],
)  # fmt: skip
def test_nan_negative_or_missing_request_values_are_bad_value(
    make_request: Callable[..., RequestArrived], change: dict
) -> None:
    assert check(dataclasses.replace(make_request(1.0, [1]), **change), nodes=4) == "bad_value"


@pytest.mark.parametrize("field", ["queue_len", "used_bytes", "est_queue_ms", "evictions_total"])
def test_negative_or_nan_telemetry_is_bad_value(
    make_telemetry: Callable[..., TelemetrySample], field: str
) -> None:
    sample = make_telemetry(1.0, 0)
    for value in (-1, NAN):
        assert check(dataclasses.replace(sample, **{field: value}), nodes=4) == "bad_value"


def test_zero_capacity_is_bad_value(make_telemetry: Callable[..., TelemetrySample]) -> None:
    sample = dataclasses.replace(make_telemetry(1.0, 0), capacity_bytes=0)
    assert check(sample, nodes=4) == "bad_value"


def test_nodes_outside_the_cluster_are_unknown_node(
    make_request: Callable[..., RequestArrived],
) -> None:
    assert check(make_request(1.0, [1], node=4), nodes=4) == "unknown_node"
    assert check(BlockRemoved(1.0, -1, (1,)), nodes=4) == "unknown_node"
    assert check(ReplicationDone(1.0, 0, 9, (1,), True), nodes=4) == "unknown_node"


def test_objects_that_are_not_events_are_unknown_event() -> None:
    assert check("hello", nodes=4) == "unknown_event"


def test_repeated_hashes_keep_their_first_occurrence() -> None:
    assert unique_blocks((1, 2, 1, 3, 2)) == ((1, 2, 3), 2)
    assert unique_blocks((4, 5)) == ((4, 5), 0)


def test_counters_start_at_zero_and_refuse_unknown_names() -> None:
    bad = BadInputCounters()
    assert bad.as_dict() == dict.fromkeys(BAD_INPUT, 0)
    bad.inc("bad_value", 2)
    assert bad.total() == 2
    with pytest.raises(KeyError, match="valid"):
        bad.inc("no_such_counter")
