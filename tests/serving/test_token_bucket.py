"""The token bucket's arithmetic: a burst, then the rate; ``consume`` runs into debt (a link
cannot refuse a received chunk), ``try_take`` takes all or nothing and says how long until
it would fit (never, over the burst); it never saves more than its burst."""

from __future__ import annotations

import math

import pytest

from kvcast.serving.token_bucket import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_a_burst_then_charges_the_debt_as_delay() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    assert bucket.consume(500) == 0.0
    assert bucket.consume(250) == pytest.approx(0.25)  # 250 B of debt at 1000 B/s
    clock.now += 0.25
    assert bucket.tokens == pytest.approx(0.0)


def test_bucket_never_saves_more_than_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    clock.now += 100.0
    assert bucket.tokens == 500
    assert bucket.consume(1500) == pytest.approx(1.0)


def test_bucket_rejects_nonpositive_rates() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(rate=1, burst=0)


def test_try_take_takes_what_fits_and_refuses_the_rest_whole_saying_when_it_would_fit() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10, burst=20, clock=clock)
    assert bucket.try_take(15) == 0.0
    assert bucket.try_take(8) == pytest.approx(0.3)  # 5 held, 3 more at 10/s
    assert bucket.tokens == pytest.approx(5.0)  # the refused 8 took nothing
    clock.now += 0.3
    assert bucket.try_take(8) == 0.0
    assert bucket.tokens == pytest.approx(0.0)


def test_try_take_over_the_burst_never_fits_and_takes_nothing() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10, burst=20, clock=clock)
    assert bucket.try_take(21) == math.inf
    assert bucket.tokens == 20
    assert bucket.try_take(20) == 0.0
