"""1×1 convolution as one GEMM over channels: (N·H·W × C) @ (C × K).

With unit stride the NHWC input already is the GEMM's left matrix, so nothing is copied;
a strided 1×1 first subsamples the input (the only workspace), then runs the same GEMM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict, failed
from .common import ITEM, Prepared, as_f32, check_x, float_only, new_output
from .epilogue import finish


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    dtype = float_only(p, "gemm_1x1")
    if dtype.ok and (p.kh, p.kw, p.groups) != (1, 1, 1) or p.pad != (0, 0, 0, 0):
        # the registry's constraint, repeated: this module's GEMM has no other shape
        return failed(f"numpy gemm_1x1 runs ungrouped, unpadded 1x1 kernels, not {p}")
    return dtype


class Gemm1x1(Prepared):
    """``y = x[:, ::sy, ::sx] @ w.T``; no copy of ``x`` at unit stride (F32)."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.w = as_f32(w_ohwi.reshape(p.k, p.c).T)          # C × K
        strided = p.stride != (1, 1) or p.dilation != (1, 1)
        copy = p.n * p.out_h * p.out_w * p.c * ITEM if strided or p.dtype == "F16" else 0
        super().__init__(p, bias, copy)

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        x = check_x(p, x)
        sy, sx = p.stride
        if (sy, sx) != (1, 1):
            x = self.float32(x[:, : (p.out_h - 1) * sy + 1: sy, : (p.out_w - 1) * sx + 1: sx])
        else:
            x = self.float32(x)
        rows = p.n * p.out_h * p.out_w
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        np.matmul(x.reshape(rows, p.c), self.w, out=y.reshape(rows, p.k))
        return finish(p, y, self.bias)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Gemm1x1:
    return Gemm1x1(p, w_ohwi, bias)
