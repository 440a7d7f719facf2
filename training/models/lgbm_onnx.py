"""LightGBM -> ONNX with onnxmltools, made exact and lean for serving.

Two adjustments keep the ONNX graph equal to the native booster (within float32 summation):

- thresholds are rounded *down* to float32 before conversion (:func:`float32_thresholds`):
  ONNX tree nodes compare float32 inputs with float32 thresholds, and rounding a double
  threshold up onto an input value flips ``x <= t``. With ``t32 = max float32 <= t`` the
  comparison ``x <= t32`` equals ``x <= t`` for every float32 ``x``; the rounded booster *is*
  the native model from then on;
- the converted ``TreeEnsembleClassifier`` (labels and two probability columns) is replaced by a
  ``TreeEnsembleRegressor`` with the same nodes that returns the raw margin: about a third
  faster, and the calibration table maps margins to probabilities.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
from onnx import helper

from kvcast.training.models.onnx_graph import INPUT, OUTPUT

_THRESHOLD = re.compile(r"^threshold=(.*)$", re.MULTILINE)
_SIZES = re.compile(r"^tree_sizes=.*\n", re.MULTILINE)
_COPIED = ("nodes_", "base_values")


def _floor32(value: float) -> float:
    f = np.float32(value)
    if float(f) > value:
        f = np.nextafter(f, np.float32(-np.inf), dtype=np.float32)
    return float(f)


def float32_thresholds(model_str: str) -> str:
    """The booster text with every split threshold replaced by the largest float32 <= it."""
    if "cat_threshold=" in model_str and re.search(r"^cat_threshold=\S", model_str, re.M):
        raise ValueError("categorical splits are not supported by the ONNX export")

    def fix(m: re.Match[str]) -> str:
        vals = [repr(_floor32(float(v))) for v in m.group(1).split()]
        return "threshold=" + " ".join(vals)

    # tree_sizes holds byte lengths of the tree blocks, which the edit changes; without it
    # LightGBM parses the trees sequentially
    return _SIZES.sub("", _THRESHOLD.sub(fix, model_str))


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def to_regressor(model: onnx.ModelProto, n_features: int) -> onnx.ModelProto:
    """Replace the binary tree classifier by a regressor returning the margin ``[n, 1]``."""
    trees = [n for n in model.graph.node if n.op_type == "TreeEnsembleClassifier"]
    if len(trees) != 1:
        raise ValueError("expected one TreeEnsembleClassifier in the converted LightGBM graph")
    src = _attrs(trees[0])
    attrs = {k: v for k, v in src.items() if k.startswith(_COPIED)}
    if set(src.get("class_ids", [])) - {0}:
        raise ValueError("only binary LightGBM models can be exported")
    attrs |= {
        "target_ids": src["class_ids"],
        "target_nodeids": src["class_nodeids"],
        "target_treeids": src["class_treeids"],
        "target_weights": src["class_weights"],
        "n_targets": 1,
        "aggregate_function": "SUM",
        "post_transform": "NONE",
    }
    node = helper.make_node(
        "TreeEnsembleRegressor", [INPUT], [OUTPUT], domain="ai.onnx.ml", **attrs
    )
    graph = helper.make_graph(
        [node],
        "kvcast_lgbm",
        [helper.make_tensor_value_info(INPUT, onnx.TensorProto.FLOAT, ["n", n_features])],
        [helper.make_tensor_value_info(OUTPUT, onnx.TensorProto.FLOAT, ["n", 1])],
    )
    opsets = [helper.make_opsetid("", 15), helper.make_opsetid("ai.onnx.ml", 3)]
    out = helper.make_model(graph, opset_imports=opsets, producer_name="onnxmltools+kvcast")
    out.ir_version = 8
    onnx.checker.check_model(out)
    return out


def booster_to_onnx(booster: Any, n_features: int) -> onnx.ModelProto:
    """Convert with onnxmltools, then keep only the margin regressor."""
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    converted = convert_lightgbm(
        booster,
        initial_types=[(INPUT, FloatTensorType([None, n_features]))],
        zipmap=False,
        target_opset=15,
    )
    return to_regressor(converted, n_features)
