import pytest

from kvcast.simulator.capacity import find_capacity


def linear_attainment(knee: float):
    return lambda x: 1.0 if x <= knee else max(0.0, 1.0 - (x - knee))


@pytest.mark.parametrize("knee", [0.3, 1.0, 1.7, 5.2])
def test_capacity_finds_the_highest_load_meeting_the_target_within_tolerance(knee: float) -> None:
    res = find_capacity(linear_attainment(knee), target=0.9, rel_tol=0.01)
    true = knee + 0.1
    assert res.time_scale <= true
    assert res.time_scale >= true * 0.98


def test_every_probe_below_the_reported_capacity_passing_is_recorded() -> None:
    res = find_capacity(linear_attainment(2.0), target=0.9)
    assert (res.time_scale, 1.0) in res.probes or any(
        x == res.time_scale and a >= 0.9 for x, a in res.probes
    )


def test_capacity_is_zero_when_even_the_lowest_load_misses() -> None:
    assert find_capacity(lambda x: 0.5, target=0.9).time_scale == 0.0


def test_capacity_stops_at_the_upper_limit_when_nothing_fails() -> None:
    assert find_capacity(lambda x: 1.0, hi_limit=16.0).time_scale == 16.0


def test_no_probe_goes_past_the_limits_the_search_was_given() -> None:
    high = find_capacity(lambda x: 1.0, hi_limit=10.0)
    assert high.time_scale == 10.0 and max(x for x, _ in high.probes) == 10.0
    low = find_capacity(lambda x: 0.5, lo_limit=0.1)
    assert low.time_scale == 0.0 and min(x for x, _ in low.probes) == 0.1
    knee = find_capacity(lambda x: 1.0 if x <= 0.1 else 0.0, lo_limit=0.1)
    assert knee.time_scale == 0.1
