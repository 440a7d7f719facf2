"""The exported ONNX graph scores like the native model (1e-5) on the test window.

The tcn kind is checked by the end-to-end test (every export measures native vs ONNX on the
test window, ``onnx_parity_max_abs``), so that its Lightning training runs once. An export
replaces its file in one rename: a reader never sees half of a model. A training run's export
(:func:`export_checked`) is refused when the ONNX file scores otherwise, beyond the run's
tolerance: the file never takes the model's name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from tiny_training import table_for

from kvcast.predictor.model_meta import ModelMeta
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.config import PARITY_TOLERANCE
from kvcast.training.data import TrainingData
from kvcast.training.evaluate import predict_rows
from kvcast.training.export import Export, ParityError, export_checked, write_onnx
from kvcast.training.registry import FittedModel


def export(model: FittedModel, data: TrainingData, path: Path) -> OnnxScorer:
    write_onnx(model, ModelMeta(model.kind, data.spec, window=model.window), path)
    return OnnxScorer.load(path, expected=data.spec)


@pytest.mark.parametrize("kind", ["recency", "rule", "lgbm"])
def test_onnx_equals_native_on_the_test_window(
    kind: str,
    fitted: Callable[[str], FittedModel],
    tiny_data: dict[str, TrainingData],
    tmp_path: Path,
) -> None:
    model, data = fitted(kind), tiny_data[table_for(kind)]
    scorer = export(model, data, tmp_path / "m.onnx")
    te = data.rows("test")
    windows = data.window_index(model.window) if model.window else None
    native = predict_rows(model.predict_raw, data.x, te, model.window, windows)
    served = predict_rows(scorer.raw, data.x, te, model.window, windows)
    assert len(te) > 100 and np.isfinite(served).all()
    np.testing.assert_allclose(served, native, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["rule", "lgbm"])
def test_onnx_equals_native_on_rows_with_missing_values(
    kind: str,
    fitted: Callable[[str], FittedModel],
    tiny_data: dict[str, TrainingData],
    tmp_path: Path,
) -> None:
    model, data = fitted(kind), tiny_data["sampled"]
    scorer = export(model, data, tmp_path / "m.onnx")
    x = data.x[data.rows("test")].copy()
    rng = np.random.default_rng(1)
    x[rng.random(x.shape) < 0.2] = np.nan
    np.testing.assert_allclose(scorer.raw(x), model.predict_raw(x), rtol=0, atol=1e-5)


def test_lgbm_thresholds_between_float32_values_keep_parity() -> None:
    """A split threshold that float32 would round up onto a data value must not flip it."""
    import lightgbm as lgb

    from kvcast.training.models.lgbm_onnx import booster_to_onnx, float32_thresholds

    rng = np.random.default_rng(0)
    base = np.float32(0.98029369)  # three adjacent float32 values: the midpoints are doubles
    near = [np.nextafter(base, np.float32(-1)), base, np.nextafter(base, np.float32(2))]
    x = np.stack([np.resize(np.array(near, np.float32), 4000), rng.random(4000, np.float32)], 1)
    y = (x[:, 0] > base).astype(int)
    booster = lgb.train(
        {"objective": "binary", "verbose": -1, "min_data_in_leaf": 5},
        lgb.Dataset(x, y),
        num_boost_round=3,
    )
    exact = lgb.Booster(model_str=float32_thresholds(booster.model_to_string()))
    np.testing.assert_array_equal(
        exact.predict(x.astype(np.float64), raw_score=True),
        booster.predict(x.astype(np.float64), raw_score=True),
    )
    import onnxruntime as ort

    sess = ort.InferenceSession(booster_to_onnx(exact, 2).SerializeToString())
    served = sess.run(None, {"features": x})[0].ravel()
    np.testing.assert_allclose(served, exact.predict(x, raw_score=True), rtol=0, atol=1e-5)


def test_an_export_over_a_model_replaces_it_whole_and_leaves_no_temporary_file(
    fitted: Callable[[str], FittedModel], tiny_data: dict[str, TrainingData], tmp_path: Path
) -> None:
    """A reader that opened the old file (a sidecar reloading it) reads the whole old model,
    not the new one written over it in place; the new one is complete under the same name."""
    data = tiny_data["sampled"]
    path = tmp_path / "model.onnx"
    export(fitted("recency"), data, path)
    old = path.read_bytes()
    with path.open("rb") as reader:
        scorer = export(fitted("rule"), data, path)
        assert reader.read() == old
    assert scorer.kind == "rule" and path.read_bytes() != old
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


@dataclass
class MisExported:
    """A fitted model with a converter bug: it scores as ``model``, but its ONNX graph is
    ``graph``'s (the same kind, another fit: a wrong constant in the graph)."""

    model: FittedModel
    graph: FittedModel

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def to_onnx(self) -> onnx.ModelProto:
        return self.graph.to_onnx()


def export_test_window(model: Any, data: TrainingData, path: Path, tolerance: float) -> Export:
    windows = data.window_index(model.window) if model.window else None
    meta = ModelMeta(model.kind, data.spec, window=model.window)
    return export_checked(model, meta, path, data.x, data.rows("test"), windows, tolerance)


@pytest.mark.parametrize(
    ("shift", "gap"),
    [(0.5, r"by up to 0\.5 "), (float("nan"), r"by NaN \(a score is not a number\)")],
)
def test_an_export_whose_graph_scores_otherwise_is_refused_and_leaves_no_file(
    shift: float,
    gap: str,
    fitted: Callable[[str], FittedModel],
    tiny_data: dict[str, TrainingData],
    tmp_path: Path,
) -> None:
    """The graph's bias is off by 0.5 (or NaN, which a plain ``gap > tolerance`` would let through):
    refused in one line naming the kind, the gap and the tolerance; no model.onnx, and no
    temporary file, is left in the folder."""
    from kvcast.training.models.rule import RuleModel

    rule = fitted("rule")
    assert isinstance(rule, RuleModel)
    wrong = MisExported(rule, dataclasses.replace(rule, bias=rule.bias + shift))
    with pytest.raises(ParityError) as err:
        export_test_window(wrong, tiny_data["sampled"], tmp_path / "model.onnx", 1e-5)
    message = str(err.value)
    assert "\n" not in message and re.search(gap, message), message
    assert "the rule model" in message and "export.parity_tolerance=1e-05" in message
    assert list(tmp_path.iterdir()) == []


def test_a_refused_export_leaves_the_earlier_model_and_its_files_as_they_were(
    fitted: Callable[[str], FittedModel], tiny_data: dict[str, TrainingData], tmp_path: Path
) -> None:
    """A real gap: LightGBM sums its trees in float64, the ONNX graph in float32 (a few
    1e-7 on the tiny data), so a tolerance of 0 refuses it. The model already in the folder
    (a sidecar may be serving it) and its metrics stay, byte for byte."""
    data, path = tiny_data["sampled"], tmp_path / "model.onnx"
    metrics = tmp_path / "metrics.json"
    export_test_window(fitted("rule"), data, path, PARITY_TOLERANCE["rule"])
    metrics.write_text("{}")
    before = path.read_bytes()
    with pytest.raises(ParityError, match=r"lgbm model .* by up to \d\.\d+e-0\d .*=0;") as err:
        export_test_window(fitted("lgbm"), data, path, 0.0)
    assert 0 < err.value.gap < PARITY_TOLERANCE["lgbm"]
    assert path.read_bytes() == before and metrics.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "model.onnx"]


@pytest.mark.parametrize("kind", ["recency", "rule", "lgbm"])
def test_an_export_within_its_kinds_default_tolerance_replaces_the_model(
    kind: str,
    fitted: Callable[[str], FittedModel],
    tiny_data: dict[str, TrainingData],
    tmp_path: Path,
) -> None:
    """The checked file is the one renamed into place, and no temporary file is left."""
    data, path = tiny_data[table_for(kind)], tmp_path / "model.onnx"
    done = export_test_window(fitted(kind), data, path, PARITY_TOLERANCE[kind])
    assert 0 <= done.gap <= PARITY_TOLERANCE[kind]
    assert path.read_bytes() == done.proto.SerializeToString()
    assert done.scorer.kind == kind and OnnxScorer.load(path, expected=data.spec).kind == kind
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]
