"""ONNX scorer latency per model kind; prints one JSON object.

For 1, 64, 1,024 and 8,192 rows: p50 and p99 of ``OnnxScorer.score`` (the served path:
input checks, onnxruntime on one thread, calibration table) and of the bare
``InferenceSession.run``, beside a same-run baseline on the same rows: a numpy dot product
with a weight vector (machines here are noisy; compare ratios across runs).

Models: ``--model NAME=PATH`` (repeatable); by default ``kvcast-out/train/<kind>/model.onnx``
for each kind, and a kind without a file there is trained first on the bundled sample
(tracking off, into a temporary folder). Rows are real feature rows of the bundled sample.

    python benchmarks/bench_scorer.py [--model lgbm=PATH ...] [--repeat-scale 1.0]

Goal (issue 4): 1,024 candidate blocks scored in <= 1 ms p99 on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.predictor.scorer import OnnxScorer
from kvcast.predictor.windows import gather_windows, window_index
from kvcast.training.data import feature_matrix, replay_features

KINDS = ("recency", "rule", "lgbm", "tcn")
SIZES = (1, 64, 1024, 8192)
REPEATS = {1: 3000, 64: 2000, 1024: 500, 8192: 100}
ROOT = Path(__file__).resolve().parents[1]


def timings(fn: Callable[[], Any], n: int) -> dict[str, float]:
    for _ in range(min(50, n)):
        fn()
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return {
        "p50_us": float(np.percentile(out, 50) * 1e6),
        "p99_us": float(np.percentile(out, 99) * 1e6),
    }


def default_models(tmp: Path) -> dict[str, Path]:
    from kvcast.training.config import TrainConfig, load_train_config
    from kvcast.training.pipeline import run_training

    out = {}
    for kind in KINDS:
        path = Path("kvcast-out/train") / kind / "model.onnx"
        if not path.is_file():
            data = load_train_config(ROOT / "configs/train" / f"{kind}.yaml").model_dump()
            data["tracking"]["enabled"] = False
            data["out_dir"] = str(tmp / kind)
            path = run_training(TrainConfig.model_validate(data)).model_path
        out[kind] = path
    return out


def bench(path: Path, x: np.ndarray, block: np.ndarray, tick: np.ndarray, scale: float) -> dict:
    scorer = OnnxScorer.load(path, threads=1)
    rng = np.random.default_rng(0)
    widx = window_index(block, tick, scorer.window) if scorer.window else None
    result: dict[str, Any] = {"kind": scorer.kind, "path": str(path), "window": scorer.window}
    for n in SIZES:
        idx = rng.choice(len(x), n)
        rows = gather_windows(x, widx[idx]) if widx is not None else np.ascontiguousarray(x[idx])
        flat = np.nan_to_num(rows.reshape(n, -1))
        weights = rng.standard_normal(flat.shape[1]).astype(np.float32)
        feed = {scorer.meta.input: scorer._prepare(rows)}
        reps = max(20, int(REPEATS[n] * scale))
        result[str(n)] = {
            "score": timings(lambda r=rows: scorer.score(r), reps),
            "onnx_run": timings(lambda f=feed: scorer.session.run(None, f), reps),
            "baseline_numpy_dot": timings(lambda a=flat, w=weights: a @ w, reps),
        }
        s = result[str(n)]
        s["score_vs_baseline_p50"] = s["score"]["p50_us"] / max(
            s["baseline_numpy_dot"]["p50_us"], 1e-9
        )
    result["goal_1024_p99_le_1ms"] = result["1024"]["score"]["p99_us"] <= 1000.0
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH (repeatable)")
    ap.add_argument("--repeat-scale", type=float, default=1.0, help="scale the repeat counts")
    args = ap.parse_args()
    df, spec, _ = replay_features(
        "bundled:conversation", FeatureConfig(sampling={"negative_keep": 1.0})
    )
    x = feature_matrix(df, spec)
    block, tick = df["block"].to_numpy(), df["tick_ms"].to_numpy()
    from threadpoolctl import threadpool_limits  # the numpy baseline on one core too

    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1):
        models = (
            dict(kv.split("=", 1) for kv in args.model) if args.model else default_models(Path(tmp))
        )
        out = {
            "machine": {
                "python": platform.python_version(),
                "cpu": platform.machine(),
                "cores": os.cpu_count(),
            },
            "threads": 1,
            "rows_source": f"bundled:conversation, {len(x):,} candidate rows",
            "models": {
                name: bench(Path(p), x, block, tick, args.repeat_scale)
                for name, p in models.items()
            },
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
