"""im2col + GEMM: copy every receptive field into one row of a matrix, then one BLAS call.

The rows come from ``sliding_window_view`` (strides and dilation are view slicing), ordered
(KH, KW, C) so that the copy's inner loop runs over contiguous channels and the OHWI weights
are the GEMM's right-hand matrix without reordering. Groups become a batched GEMM with the
group as batch; depthwise (one input channel per group) is a multiply-and-sum instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...acl.verdict import Verdict
from ...problem import ConvProblem
from .common import Prepared, as_f32, check_x, float_only, nbytes, new_output, padded_bytes, patches
from .epilogue import finish


def supports(p: ConvProblem, runtime: Any = None) -> Verdict:
    return float_only(p, "im2col_gemm")


class Im2colGemm(Prepared):
    """One (N·OH·OW × KH·KW·C) @ (KH·KW·C × K) GEMM per group."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        g, kg = p.groups, p.k // p.groups
        taps = p.kh * p.kw * (p.c // g)
        # (G, KH·KW·Cg, Kg): each group's weights as the GEMM's right-hand matrix.
        self.w = as_f32(w_ohwi.reshape(g, kg, taps).transpose(0, 2, 1))
        rows = p.n * p.out_h * p.out_w
        grouped_out = (rows, p.k) if g > 1 else (0,)   # the batched GEMM's (G, rows, Kg)
        super().__init__(p, bias, nbytes((rows, p.kh * p.kw * p.c), grouped_out)
                         + padded_bytes(p))

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        xp = self.padded(check_x(p, x), *p.pad)
        fields = patches(p, xp)                            # N, OH, OW, KH, KW, C (a view)
        rows = p.n * p.out_h * p.out_w
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        if p.groups == 1:
            cols = self.scratch("cols", (rows, p.kh * p.kw * p.c))
            np.copyto(cols.reshape(fields.shape), fields)   # the im2col copy
            np.matmul(cols, self.w[0], out=y.reshape(rows, p.k))
        else:
            self._grouped(fields, y.reshape(rows, p.groups, p.k // p.groups))
        return finish(p, y, self.bias)

    def _grouped(self, fields: np.ndarray, y: np.ndarray) -> None:
        p = self.problem
        g, cg = p.groups, p.c // p.groups
        rows = y.shape[0]
        split = fields.reshape(*fields.shape[:-1], g, cg)          # ..., KH, KW, G, Cg
        cols = self.scratch("cols", (g, rows, p.kh * p.kw * cg))
        np.copyto(cols.reshape(g, *fields.shape[:3], p.kh, p.kw, cg),
                  split.transpose(5, 0, 1, 2, 3, 4, 6))
        if cg == 1 and y.shape[2] == 1:   # depthwise: per channel, a dot over the taps
            np.einsum("grt,gt->rg", cols, self.w[:, :, 0], out=y[:, :, 0])
        else:
            y[...] = np.matmul(cols, self.w).transpose(1, 0, 2)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Im2colGemm:
    return Im2colGemm(p, w_ohwi, bias)
