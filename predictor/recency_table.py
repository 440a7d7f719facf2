"""The recency baseline as data: burst rate per bin of time since the block's last use.

Bins are ``[edges[i-1], edges[i])`` with ``bin = #{edges <= since_last}`` (0 below the first
edge); a missing ``since_last_ms`` (a block never seen) falls in the last bin. The same table
is the ``recency`` model kind (exported to ONNX by :mod:`kvcast.training.models.recency`) and
the baseline every exported model carries in its metadata, so ``kvcast score`` can report the
model beside the recency baseline fitted on the same training window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

FEATURE = "since_last_ms"


@dataclass(frozen=True)
class RecencyTable:
    edges: tuple[float, ...]  # ascending bin edges, ms
    rates: tuple[float, ...]  # len(edges) + 1 probabilities

    def __post_init__(self) -> None:
        if len(self.rates) != len(self.edges) + 1:
            raise ValueError("recency table: needs len(edges) + 1 rates")

    def bins(self, since_last_ms: np.ndarray) -> np.ndarray:
        """Bin index per row, computed in float32 like the ONNX graph."""
        x = np.asarray(since_last_ms, dtype=np.float32)
        x = np.where(np.isnan(x), np.float32(np.finfo(np.float32).max), x)
        edges = np.asarray(self.edges, dtype=np.float32)
        return np.searchsorted(edges, x, side="right")

    def predict(self, since_last_ms: np.ndarray) -> np.ndarray:
        return np.asarray(self.rates, dtype=np.float32)[self.bins(since_last_ms)]

    def to_json(self) -> str:
        d = {"feature": FEATURE, "edges": list(self.edges), "rates": list(self.rates)}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> RecencyTable:
        d = json.loads(text)
        return cls(tuple(map(float, d["edges"])), tuple(map(float, d["rates"])))

    @classmethod
    def fit(
        cls,
        since_last_ms: np.ndarray,
        y: np.ndarray,
        w: np.ndarray,
        n_bins: int = 32,
        prior_weight: float = 20.0,
    ) -> RecencyTable:
        """Quantile bins of the training rows; weighted rates shrunk toward the base rate."""
        x = np.asarray(since_last_ms, dtype=np.float32)
        ok = ~np.isnan(x)
        qs = np.quantile(x[ok], np.linspace(0, 1, n_bins + 1)[1:-1]) if ok.any() else []
        edges = tuple(float(e) for e in np.unique(np.asarray(qs, dtype=np.float32)))
        table = cls(edges, (0.0,) * (len(edges) + 1))
        b = table.bins(x)
        wy = np.bincount(b, weights=w * y, minlength=len(edges) + 1)
        ww = np.bincount(b, weights=w, minlength=len(edges) + 1)
        base = float((w * y).sum() / w.sum()) if w.sum() > 0 else 0.0
        rates = (wy + prior_weight * base) / (ww + prior_weight)
        return cls(edges, tuple(float(r) for r in rates))
