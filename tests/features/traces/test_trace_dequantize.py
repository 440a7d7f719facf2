import numpy as np

from kvcast.data import bundled_trace_path
from kvcast.features.traces import load_trace
from kvcast.features.traces.dequantize import detect_quantum_ms, spread_quantized


def test_conversation_trace_is_detected_as_quantised_to_3_s() -> None:
    tr = load_trace(bundled_trace_path("conversation"))
    assert detect_quantum_ms(tr.requests["arrival_ms"].to_numpy()) == 3000.0


def test_poisson_like_synthetic_trace_is_left_as_it_is() -> None:
    tr = load_trace(bundled_trace_path("synthetic"))
    assert detect_quantum_ms(tr.requests["arrival_ms"].to_numpy()) is None
    assert spread_quantized(tr) is tr


def test_spread_keeps_order_stays_inside_the_quantum_and_is_seeded() -> None:
    tr = load_trace(bundled_trace_path("conversation"))
    before = tr.requests["arrival_ms"].to_numpy()
    after = spread_quantized(tr, seed=1).requests["arrival_ms"].to_numpy()
    assert np.all(np.diff(after) >= 0)
    assert np.all((after >= before) & (after < before + 3000.0))
    assert len(np.unique(after)) == len(after)
    again = spread_quantized(tr, seed=1).requests["arrival_ms"].to_numpy()
    assert np.array_equal(after, again)
