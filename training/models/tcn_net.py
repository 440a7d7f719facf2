"""The temporal convolution network itself (plain torch, exportable with torch.onnx).

Input ``[n, L, F]`` windows (oldest row first). In-graph preprocessing, so that the ONNX
model needs nothing from the caller:

1. NaN -> the training median of that feature;
2. ``sign(x) * |x| ** (1/4)`` as two square roots: features span milliseconds to bytes, and
   square roots are correctly rounded everywhere, while onnxruntime's Log is an approximation
   whose error the standardisation would amplify into the native-vs-ONNX gap (held to
   ``export.parity_tolerance``, 1e-3 by default; float32 summation order alone gives
   3e-5 to 7e-5 on the bundled traces);
3. standardisation with training statistics (a feature constant in training is only
   centred), clipped to +-8 standard deviations so an unseen value cannot dominate.

Causal dilated Conv1d layers (dilation 1, 2, 4, ...; left padding only), ReLU, and a linear
head on the last time step give one logit per window.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

CLIP = 8.0


def squash(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.sqrt(torch.sqrt(torch.abs(x)))


class TcnNet(nn.Module):
    def __init__(self, features: int, channels: int, kernel_size: int, layers: int) -> None:
        super().__init__()
        self.register_buffer("fill", torch.zeros(features))
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("scale", torch.ones(features))
        self.pads = [(kernel_size - 1) * 2**i for i in range(layers)]
        self.convs = nn.ModuleList(
            nn.Conv1d(features if i == 0 else channels, channels, kernel_size, dilation=2**i)
            for i in range(layers)
        )
        self.head = nn.Linear(channels, 1)

    def set_statistics(self, x: np.ndarray) -> None:
        """Medians for imputation and mean/std of the squashed features, from ``[m, F]``."""
        with warnings.catch_warnings():  # an all-NaN column is fine: it is filled with 0
            warnings.simplefilter("ignore", RuntimeWarning)
            fill = np.nan_to_num(np.nanmedian(x, axis=0), nan=0.0)
            z = squash(torch.from_numpy(np.where(np.isnan(x), fill, x).astype(np.float32)))
        self.fill.copy_(torch.from_numpy(fill.astype(np.float32)))
        self.mean.copy_(z.mean(dim=0))
        std = z.std(dim=0)
        self.scale.copy_(torch.where(std > 1e-2, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.where(torch.isnan(x), self.fill, x)
        z = torch.clamp((squash(x) - self.mean) / self.scale, -CLIP, CLIP)
        h = z.transpose(1, 2)  # [n, F, L]
        for pad, conv in zip(self.pads, self.convs, strict=True):
            h = torch.relu(conv(nn.functional.pad(h, (pad, 0))))
        return self.head(h[:, :, -1]).squeeze(-1)
