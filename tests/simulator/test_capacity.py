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


def test_a_capacity_at_the_upper_limit_is_flagged_as_at_least_that() -> None:
    res = find_capacity(lambda x: 1.0, hi_limit=16.0)
    assert (res.bound, res.bound_time_scale, res.shown()) == ("upper", 16.0, ">=16")


def test_a_slo_met_at_no_load_is_flagged_as_below_the_lowest_probe() -> None:
    res = find_capacity(lambda x: 0.5, lo_limit=0.1)
    assert (res.time_scale, res.bound, res.bound_time_scale) == (0.0, "lower", 0.1)
    assert res.shown() == "<0.1"


def test_a_bracketed_capacity_carries_no_bound() -> None:
    res = find_capacity(linear_attainment(1.7), target=0.9)
    assert res.bound is None and res.bound_time_scale is None
    assert res.shown() == f"{res.time_scale:.3g}"


def test_an_unplayable_load_stops_the_search_at_that_edge_with_its_reason() -> None:
    def low(x: float) -> float | None:  # no request to judge below 0.3; misses above 0.2
        return None if x < 0.3 else 0.0

    res = find_capacity(low, refused=lambda x: f"x{x:g} draws nothing")
    assert (res.time_scale, res.bound, res.bound_time_scale) == (0.0, "lower", 0.5)
    assert res.note == "x0.25 draws nothing" and res.probes[-1][0] == 0.25
    high = find_capacity(lambda x: None if x > 5 else 1.0)  # too large above 5
    assert (high.time_scale, high.bound, high.shown()) == (4.0, "upper", ">=4")
    nan = find_capacity(lambda x: float("nan") if x < 1 else 0.0)  # NaN: nothing judged
    assert (nan.time_scale, nan.bound, nan.bound_time_scale) == (0.0, "lower", 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 0.0}, "target attainment"),
        ({"target": float("nan")}, "target attainment"),
        ({"lo_limit": 0.0}, "lo_limit"),
        ({"start": 512.0}, "start"),
    ],
)
def test_capacity_search_refuses_limits_it_cannot_search(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find_capacity(lambda x: 1.0, **kwargs)


def test_a_start_that_cannot_be_played_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match=r"starting load x1 cannot be played \(too few\)"):
        find_capacity(lambda x: None, refused=lambda x: "too few")
