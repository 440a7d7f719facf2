"""Small onnx.helper utilities shared by the hand-built graphs (recency, rule).

Every graph takes ``features`` ``[n, F]`` float32 and returns ``score`` ``[n]`` float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUT = "features"
OUTPUT = "score"


class GraphBuilder:
    """Collects nodes and constants; names are made unique with a counter."""

    def __init__(self, n_features: int) -> None:
        self.n_features = n_features
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def const(self, value: np.ndarray | float | int, stem: str = "c") -> str:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], stem: str = "", **attrs: object) -> str:
        out = self.name(stem or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def column(self, j: int) -> str:
        """Feature ``j`` of every row, ``[n]``."""
        return self.op("Gather", [INPUT, self.const(np.int64(j), "col")], f"f{j}", axis=1)

    def flag(self, boolean: str) -> str:
        return self.op("Cast", [boolean], "flag", to=TensorProto.FLOAT)

    def build(self, result: str, doc: str) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Identity", [result], [OUTPUT]))
        graph = helper.make_graph(
            self.nodes,
            "kvcast",
            [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["n", self.n_features])],
            [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["n"])],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        model.doc_string = doc
        onnx.checker.check_model(model)
        return model
