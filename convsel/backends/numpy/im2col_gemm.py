"""im2col + GEMM: copy every receptive field into one row of a matrix, then one BLAS call.

A problem whose matrix would exceed ``WORKSPACE_CAP`` runs in bands of output rows (one GEMM
each) instead. The rows come from ``sliding_window_view`` (strides and dilation are view
slicing), ordered (KH, KW, C) so that the copy's inner loop runs over contiguous channels and
the OHWI weights are the GEMM's right-hand matrix without reordering. Groups become a batched
GEMM with the group as batch; depthwise (one input channel per group) is a multiply-and-sum
instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict
from .common import (
    ITEM,
    Prepared,
    as_f32,
    check_x,
    float_only,
    new_output,
    padded_bytes,
    patches,
    piece_bytes,
    pieces,
)
from .epilogue import finish


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    return float_only(p, "im2col_gemm")


class Im2colGemm(Prepared):
    """One (N·OH·OW × KH·KW·C) @ (KH·KW·C × K) GEMM per group."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        g, kg = p.groups, p.k // p.groups
        taps = p.kh * p.kw * (p.c // g)
        # (G, KH·KW·Cg, Kg): each group's weights as the GEMM's right-hand matrix.
        self.w = as_f32(w_ohwi.reshape(g, kg, taps).transpose(0, 2, 1))
        # bytes per output row: its im2col rows, and the batched GEMM's (G, rows, Kg) if grouped
        self.row_bytes = p.out_w * (p.kh * p.kw * p.c + (p.k if g > 1 else 0)) * ITEM
        super().__init__(p, bias, piece_bytes(p.n, p.out_h, self.row_bytes) + padded_bytes(p))

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        xp = self.padded(check_x(p, x), *p.pad)
        fields = patches(p, xp)                            # N, OH, OW, KH, KW, C (a view)
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        for images, rows in pieces(p.n, p.out_h, self.row_bytes):
            piece, out = fields[images, rows], y[images, rows]
            count = piece.shape[0] * piece.shape[1] * p.out_w
            if p.groups == 1:
                cols = self.scratch("cols", (count, p.kh * p.kw * p.c))
                np.copyto(cols.reshape(piece.shape), piece)   # the im2col copy
                np.matmul(cols, self.w[0], out=out.reshape(count, p.k))
            else:
                self._grouped(piece, out.reshape(count, p.groups, p.k // p.groups))
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
            product = self.scratch("product", (g, rows, y.shape[2]))
            np.matmul(cols, self.w, out=product)
            y[...] = product.transpose(1, 0, 2)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Im2colGemm:
    return Im2colGemm(p, w_ohwi, bias)
