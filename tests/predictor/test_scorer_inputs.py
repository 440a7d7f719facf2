"""The ONNX scorer refuses bad models and bad rows with a reason, and never fails a batch
because some rows hold NaN."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kvcast.features import build_spec
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import FeatureSpec, SpecMismatch
from kvcast.predictor.calibration import Calibration
from kvcast.predictor.model_meta import ModelFormatError, ModelMeta
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.export import with_metadata
from kvcast.training.models.onnx_graph import GraphBuilder

SPEC = build_spec(FeatureConfig())
F = len(SPEC)


def column_model(path: Path, spec: FeatureSpec = SPEC, j: int = 0, **meta: object) -> Path:
    """A model whose raw score is feature ``j``, calibrated by the identity-like table."""
    g = GraphBuilder(len(spec))
    proto = g.build(g.op("Identity", [g.column(j)]), "test model")
    fields = {"calibration": Calibration("isotonic", (0.0, 1.0), (0.0, 1.0)), "fallback": 0.03}
    onnx.save_model(with_metadata(proto, ModelMeta("rule", spec, **(fields | meta))), str(path))
    return path


def test_scores_rows_through_the_calibration_table(tmp_path: Path) -> None:
    scorer = OnnxScorer.load(column_model(tmp_path / "m.onnx"))
    rows = np.zeros((3, F), np.float32)
    rows[:, 0] = [-1.0, 0.25, 7.0]
    np.testing.assert_allclose(scorer.score(rows), [0.0, 0.25, 1.0])
    assert scorer.score(rows[1]).shape == (1,)  # one row may be passed flat


def test_nan_and_inf_rows_get_the_declared_fallback_and_the_batch_survives(
    tmp_path: Path,
) -> None:
    scorer = OnnxScorer.load(column_model(tmp_path / "m.onnx"))
    rows = np.full((4, F), 0.5, np.float32)
    rows[1, 0], rows[2, 0], rows[3, 5] = np.nan, np.inf, np.nan
    np.testing.assert_allclose(scorer.score(rows), [0.5, 0.03, 0.03, 0.5])


def test_a_file_that_is_not_onnx_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_text("this is not a protobuf")
    with pytest.raises(ModelFormatError, match=r"model\.onnx: not a loadable ONNX model"):
        OnnxScorer.load(bad)


def test_a_missing_model_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="no such model file"):
        OnnxScorer.load(tmp_path / "nope.onnx")


def test_an_onnx_file_without_kvcast_metadata_is_refused_naming_the_keys(tmp_path: Path) -> None:
    g = GraphBuilder(F)
    path = tmp_path / "plain.onnx"
    onnx.save_model(g.build(g.column(0), "plain"), str(path))
    with pytest.raises(ModelFormatError, match=r"not a kvcast model .*kvcast\.feature_spec"):
        OnnxScorer.load(path)


def test_a_model_without_the_declared_input_is_refused(tmp_path: Path) -> None:
    node = helper.make_node("Identity", ["x"], ["score"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", F])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", F])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(with_metadata(proto, ModelMeta("rule", SPEC)), str(path))
    with pytest.raises(ModelFormatError, match=r"no input 'features' \(its inputs: x\)"):
        OnnxScorer.load(path)


def test_a_graph_whose_width_differs_from_its_spec_is_refused(tmp_path: Path) -> None:
    g = GraphBuilder(F - 1)
    proto = g.build(g.column(0), "narrow")
    path = tmp_path / "m.onnx"
    onnx.save_model(with_metadata(proto, ModelMeta("rule", SPEC)), str(path))
    with pytest.raises(ModelFormatError, match=rf"spec declares \[n, {F}\]"):
        OnnxScorer.load(path)


def test_rows_with_the_wrong_feature_count_are_refused_with_the_expected_shape(
    tmp_path: Path,
) -> None:
    scorer = OnnxScorer.load(column_model(tmp_path / "m.onnx"))
    with pytest.raises(ValueError, match=rf"\(39 features\); model rule expects \[n, {F}\]"):
        scorer.score(np.zeros((5, F - 1)))
    with pytest.raises(ValueError, match="rows must be numeric"):
        scorer.score([["a"] * F])


def test_a_model_with_another_spec_is_refused_naming_the_features(tmp_path: Path) -> None:
    other = build_spec(FeatureConfig(heat_half_lives_ms=(5000.0, 60000.0, 300000.0)))
    path = column_model(tmp_path / "m.onnx", spec=other)
    with pytest.raises(SpecMismatch, match=r"heat_30s: missing .*heat_60s: only in"):
        OnnxScorer.load(path, expected=SPEC)


def test_the_scorer_module_imports_neither_torch_lightgbm_nor_mlflow() -> None:
    code = (
        "import sys, kvcast.predictor.scorer, kvcast.cli.app\n"
        "bad = [m for m in ('torch', 'lightgbm', 'mlflow', 'sklearn') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_label_horizon_is_read_from_the_recorded_feature_config() -> None:
    from kvcast.features.config import FeatureConfig

    fcfg = FeatureConfig.model_validate({"labels": {"horizon_ms": 120_000.0}})
    meta = ModelMeta("rule", SPEC, extra={"feature_config": fcfg.model_dump_json()})
    assert meta.label_horizon_ms == 120_000.0
    meta.require_horizon(120_000.0)  # the same window: accepted
    assert ModelMeta("rule", SPEC).label_horizon_ms is None  # records none: any window
    ModelMeta("rule", SPEC).require_horizon(30_000.0)
    assert ModelMeta("rule", SPEC, extra={"feature_config": "{"}).label_horizon_ms is None


def test_a_model_for_another_horizon_is_refused_naming_both() -> None:
    from kvcast.features.config import FeatureConfig
    from kvcast.predictor.model_meta import HorizonMismatch

    fcfg = FeatureConfig.model_validate({"labels": {"horizon_ms": 120_000.0}})
    meta = ModelMeta("rule", SPEC, extra={"feature_config": fcfg.model_dump_json()})
    with pytest.raises(HorizonMismatch, match=r"m.onnx: .* within 120000 ms .* window_ms is 30000"):
        meta.require_horizon(30_000.0, "m.onnx")


@pytest.mark.parametrize("fallback", ["nan", "1.5"])
def test_a_fallback_that_is_not_a_probability_is_refused(fallback: str) -> None:
    props = ModelMeta("rule", SPEC).to_props() | {"kvcast.fallback": fallback}
    with pytest.raises(ModelFormatError, match="fallback must be a probability"):
        ModelMeta.from_props(props, "m.onnx")


def test_an_unreadable_model_store_is_a_one_line_error_naming_the_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "mlruns.db"
    db.write_bytes(b"this is not an sqlite database" * 50)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    with pytest.raises(ModelFormatError, match=r"^models:/kvcast-rule@champion: [^\n]*$"):
        OnnxScorer.load("models:/kvcast-rule@champion")


def window_model(path: Path, graph_window: int, meta_window: int) -> Path:
    """A sequence model (the mean of its ``[n, graph_window, F]`` window) whose metadata
    declares ``kvcast.window = meta_window``."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["features", "axes"], ["m"], keepdims=0),
            helper.make_node("Sigmoid", ["m"], ["score"]),
        ],
        "window",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", graph_window, F])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n"])],
        [axes],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    proto.ir_version = 8
    onnx.save_model(with_metadata(proto, ModelMeta("tcn", SPEC, window=meta_window)), str(path))
    return path


def test_a_window_model_whose_graph_window_differs_from_its_metadata_is_refused_at_load(
    tmp_path: Path,
) -> None:
    ok = OnnxScorer.load(window_model(tmp_path / "ok.onnx", 4, 4))
    assert ok.window == 4 and ok.score(np.zeros((2, 4, F))).shape == (2,)
    with pytest.raises(
        ModelFormatError,
        match=r"bad\.onnx: input 'features' takes windows of 4 rows .* declares kvcast\.window 8",
    ):
        OnnxScorer.load(window_model(tmp_path / "bad.onnx", 4, 8))
