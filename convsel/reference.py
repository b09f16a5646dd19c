"""The float64 reference convolution: slow, obvious, and the oracle every algorithm is tested
against (NNPACK keeps the same in src/ref/)."""

from __future__ import annotations

import numpy as np

from .problem import ConvProblem


def conv2d_reference(p: ConvProblem, x: np.ndarray, w: np.ndarray,
                     bias: np.ndarray | None = None) -> np.ndarray:
    """Convolve NHWC ``x`` with OHWI ``w`` in float64; bias and activation applied.

    One tap at a time: for each kernel position (i, j) the strided, dilated window of the
    padded input is multiplied by that tap's weights, group by group.
    """
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(w, dtype=np.float64)
    top, bottom, left, right = p.pad
    xp = np.pad(x64, ((0, 0), (top, bottom), (left, right), (0, 0)))
    sy, sx = p.stride
    dy, dx = p.dilation
    cg, kg = p.c // p.groups, p.k // p.groups
    y = np.zeros((p.n, p.out_h, p.out_w, p.k), dtype=np.float64)
    for i in range(p.kh):
        for j in range(p.kw):
            rows = slice(i * dy, i * dy + sy * (p.out_h - 1) + 1, sy)
            cols = slice(j * dx, j * dx + sx * (p.out_w - 1) + 1, sx)
            window = xp[:, rows, cols, :]
            for g in range(p.groups):
                y[..., g * kg:(g + 1) * kg] += (window[..., g * cg:(g + 1) * cg]
                                                @ w64[g * kg:(g + 1) * kg, i, j, :].T)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)
    if p.activation is not None:
        y = p.activation.apply(y)
    return y
