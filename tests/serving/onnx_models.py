"""Real kvcast ONNX models for the serving tests (sidecar, cluster), built with onnx.helper:
a recency rule ``P = exp(-since_last_ms / tau)`` (a never-seen block scores 0), with the
metadata the scorer reads (:class:`ModelMeta`: kind, feature spec, input/output names,
calibration, fallback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kvcast.features.spec import FeatureSpec
from kvcast.predictor.model_meta import ModelMeta


def write_recency_model(
    path: Path,
    spec: FeatureSpec,
    *,
    tau_ms: float = 30_000.0,
    kind: str = "recency-test",
    extra: dict[str, str] | None = None,
) -> Path:
    col = spec.index("since_last_ms")
    f = len(spec)
    consts = {
        "col": np.array(col, dtype=np.int64),
        "never": np.array(np.finfo(np.float32).max, dtype=np.float32),
        "neg_inv_tau": np.array(-1.0 / tau_ms, dtype=np.float32),
        "zero": np.array(0.0, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["features", "col"], ["since"], axis=1),
        helper.make_node("IsNaN", ["since"], ["missing"]),
        helper.make_node("Where", ["missing", "never", "since"], ["since_ok"]),
        helper.make_node("Max", ["since_ok", "zero"], ["age"]),
        helper.make_node("Mul", ["age", "neg_inv_tau"], ["logp"]),
        helper.make_node("Exp", ["logp"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "kvcast-test",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", f])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n"])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = ModelMeta(
        kind=kind, spec=spec, version="test", missing="never seen: P = 0", extra=extra or {}
    )
    for key, value in meta.to_props().items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


def write_window_model(path: Path, spec: FeatureSpec, window: int = 4) -> Path:
    """A sequence model (input ``[n, window, F]``, kind ``tcn``): the mean of its window."""
    f = len(spec)
    axes = numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("ReduceMean", ["features", "axes"], ["m"], keepdims=0),
        helper.make_node("Sigmoid", ["m"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "kvcast-window-test",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", window, f])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n"])],
        [axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    meta = ModelMeta(kind="tcn", spec=spec, window=window, version="test")
    for key, value in meta.to_props().items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


def register_model(uri: str, name: str, path: Path) -> str:
    """Log the ONNX file ``path`` to the MLflow store ``uri`` as a new version of ``name`` (as
    training registers its models); the version number. The environment is left as found."""
    import mlflow
    import mlflow.onnx

    from kvcast.predictor.model_uri import environment_kept

    with environment_kept():
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        with mlflow.start_run():
            info = mlflow.onnx.log_model(
                onnx.load(str(path)), name="model", registered_model_name=name,
                pip_requirements=["onnxruntime"], save_as_external_data=False,
            )  # fmt: skip
    return str(info.registered_model_version)
