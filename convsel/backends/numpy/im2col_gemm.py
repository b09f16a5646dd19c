"""im2col + GEMM: copy every receptive field into one row of a matrix, then one BLAS call.

A problem whose matrix would exceed ``WORKSPACE_CAP`` runs in bands of output rows (one GEMM
each) instead. Two layouts of the matrix, both built with few, long copies:

- Channels-last (the default): one row per output pixel, ordered (KH, KW, C) so that the
  OHWI weights are the GEMM's right-hand matrix without reordering. With unit dilation a
  row's KW·C values per kernel row are one contiguous run of the padded input, so the copy
  moves KH runs of KW·C floats per pixel instead of KH·KW runs of C.
- Planar, for inputs with few channels (the RGB stem of ResNet and MobileNet): channels-last
  runs would be 3 floats long there. The padded input is split once into its stride phases
  as planes (C, H, W), after which each kernel tap's input is a contiguous (OH, OW) window of
  one phase: the transposed matrix (KH·KW·C × pixels) is KH·KW copies of whole planes, and
  BLAS reads it transposed at no cost.

The bias rides in the GEMM: a column (row, in the planar layout) of ones is appended to the
matrix and the bias to the weights, so no pass over the output is spent on it. Groups become
a batched GEMM with the group as batch; depthwise (one input channel per group) is a
multiply-and-sum instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...algorithms.im2col_gemm import PLANAR_MAX_C
from ...problem import ConvProblem
from ...verdict import Verdict
from . import bands
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
from .epilogue import cast, finish
from .gemm import matmul, packed
from .profile import phase


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    return float_only(p, "im2col_gemm")


def planar(p: ConvProblem) -> bool:
    # A stride wider than the kernel's extent leaves phases no tap reads: the planes would
    # cost stride_h x stride_w buffers and copies for nothing (a stride of 65535 on a 1x1
    # input was 4.3 G elements), so those problems take the plain layout.
    return (p.groups == 1 and p.c < PLANAR_MAX_C
            and p.stride[0] <= (p.kh - 1) * p.dilation[0] + 1
            and p.stride[1] <= (p.kw - 1) * p.dilation[1] + 1)


def _row_runs(p: ConvProblem, xp: np.ndarray) -> np.ndarray:
    """(N, OH, OW, KH, KW·C) view of the padded input ``xp`` (unit dilation): each kernel
    row's values for one output pixel as one contiguous run."""
    n, hp, wp, c = xp.shape
    sy, sx = p.stride
    s = xp.strides
    return as_strided(xp, shape=(n, p.out_h, p.out_w, p.kh, p.kw * c),
                      strides=(s[0], sy * s[1], sx * s[2], s[1], s[3]), writeable=False)


class Im2colGemm(Prepared):
    """One (N·OH·OW × KH·KW·C + 1) @ (KH·KW·C + 1 × K) GEMM per group (the +1: the bias)."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        g, kg = p.groups, p.k // p.groups
        taps = p.kh * p.kw * (p.c // g)
        # (G, KH·KW·Cg, Kg): each group's weights as the GEMM's right-hand matrix.
        self.w = as_f32(w_ohwi.reshape(g, kg, taps).transpose(0, 2, 1))
        self.fold_bias = g == 1 and bias is not None
        if bias is not None and self.fold_bias:
            self.w = as_f32(np.concatenate([self.w, as_f32(bias)[None, None]], axis=1))
        self.depth = self.w.shape[1]   # KH·KW·C (+ 1 with the bias folded in)
        # bytes per output row: its im2col rows, and the batched GEMM's (G, rows, Kg) if grouped
        self.row_bytes = p.out_w * (self.depth * g + (p.k if g > 1 else 0)) * ITEM
        phases = padded_bytes(p) * (2 if planar(p) else 1)
        super().__init__(p, bias, piece_bytes(p.n, p.out_h, self.row_bytes) + phases)
        # With the cpu extra, ungrouped problems build the matrix straight from the unpadded
        # input (no padded copy, no planes): the workspace claimed above is then an upper
        # bound, kept so that the pure estimate holds either way.
        self.fused = g == 1 and self.accelerated
        # ...and, where it measured faster, in bands of output rows over the threads
        self.banded = self.fused and bands.wanted(self.accelerated)
        self.chunk = bands.chunk_units(p.out_w * (self.depth + p.k) * ITEM)
        self.threads = bands.threads_for(p.flops // 2)
        self.by_columns = p.n * p.out_h * p.out_w < bands.COLUMN_SPLIT_MAX_ROWS
        # the pieces' products' weights, packed once where oneMKL multiplies
        self.b = (packed(self.w[0], p.n * p.out_h * p.out_w) if g == 1 and not self.banded
                  else self.w[0])

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        if self.fused:
            with phase("pad"):
                x = self.float32(check_x(p, x))
            y = new_output((p.n, p.out_h, p.out_w, p.k))
            if self.banded and self.by_columns:
                self._columns(x, y)
                return finish(p, y, None if self.fold_bias else self.bias, True)
            if self.banded:
                bands.run_bands(lambda start, stop: self._band(x, y, start, stop),
                                p.n * p.out_h, self.chunk, self.threads)
                return cast(p, y)
            self._fused(x, y)
            return finish(p, y, None if self.fold_bias else self.bias, True)
        with phase("pad"):
            xp = self.padded(check_x(p, x), *p.pad)
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        if planar(p):
            self._planar(xp, y)
        elif p.groups == 1:
            self._channels_last(xp, y)
        else:
            fields = patches(p, xp)                        # N, OH, OW, KH, KW, C (a view)
            for images, rows in pieces(p.n, p.out_h, self.row_bytes):
                out = y[images, rows]
                self._grouped(fields[images, rows], out.reshape(-1, p.groups, p.k // p.groups))
            return finish(p, y, self.bias, self.accelerated)
        return finish(p, y, None if self.fold_bias else self.bias, self.accelerated)

    def _channels_last(self, xp: np.ndarray, y: np.ndarray) -> None:
        p = self.problem
        taps = p.kh * p.kw * p.c
        fields = _row_runs(p, xp) if p.dilation == (1, 1) else patches(p, xp)
        for images, rows in pieces(p.n, p.out_h, self.row_bytes):
            piece, out = fields[images, rows], y[images, rows]
            count = piece.shape[0] * piece.shape[1] * p.out_w
            with phase("copy"):
                cols = self.scratch("cols", (*piece.shape[:3], self.depth))
                # the im2col copy (the destination split to the view's shape: still a view)
                np.copyto(cols[..., :taps].reshape(piece.shape), piece)
                if self.fold_bias:
                    cols[..., taps] = 1.0
            with phase("blas"):
                matmul(cols.reshape(count, self.depth), self.b,
                          out=out.reshape(count, p.k))

    def _fused(self, x: np.ndarray, y: np.ndarray) -> None:
        """The channels-last matrix written by the fused im2col, piece by piece."""
        from .fused.im2col import im2col

        p = self.problem
        for images, rows in pieces(p.n, p.out_h, self.row_bytes):
            out = y[images, rows]
            count = out.shape[0] * out.shape[1] * p.out_w
            with phase("fused"):
                cols = self.scratch("cols", (*out.shape[:3], self.depth))
                im2col(x[images], cols, rows.start, (p.kh, p.kw), p.stride, p.dilation,
                       (p.pad[0], p.pad[2]), self.fold_bias)
            with phase("blas"):
                matmul(cols.reshape(count, self.depth), self.b,
                          out=out.reshape(count, p.k))

    def _band(self, x: np.ndarray, y: np.ndarray, start: int, stop: int) -> None:
        """Output rows [start, stop) (numbered image by image): their matrix in this
        thread's buffer, the GEMM, the bias (unless folded in) and the activation."""
        from .fused.activation import code_of
        from .fused.epilogue import bias_activation
        from .fused.im2col import im2col

        p = self.problem
        for image, first, count in bands.per_image(start, stop, p.out_h):
            cols = self.scratch("band_cols", (1, count, p.out_w, self.depth))
            im2col(x[image: image + 1], cols, first, (p.kh, p.kw), p.stride, p.dilation,
                   (p.pad[0], p.pad[2]), self.fold_bias)
            out = y[image, first: first + count].reshape(count * p.out_w, p.k)
            matmul(cols.reshape(count * p.out_w, self.depth), self.w[0], out=out)
            bias = None if self.fold_bias else self.bias
            if bias is not None or p.activation is not None:
                bias_activation(out, bias, code_of(p.activation))

    def _columns(self, x: np.ndarray, y: np.ndarray) -> None:
        """Few output pixels: the whole matrix first (this thread), then the threads take
        blocks of output channels."""
        from .fused.im2col import im2col

        p = self.problem
        rows = p.n * p.out_h * p.out_w
        with phase("fused"):
            cols = self.scratch("cols", (p.n, p.out_h, p.out_w, self.depth))
            im2col(x, cols, 0, (p.kh, p.kw), p.stride, p.dilation, (p.pad[0], p.pad[2]),
                   self.fold_bias)
        a, out = cols.reshape(rows, self.depth), y.reshape(rows, p.k)

        def block(first: int, last: int) -> None:
            matmul(a, self.w[0][:, first:last], out=out[:, first:last])

        bands.run_columns(block, p.k, self.threads)

    def _planar(self, xp: np.ndarray, y: np.ndarray) -> None:
        p = self.problem
        sy, sx = p.stride
        dy, dx = p.dilation
        with phase("pad"):
            # phase (a, b) as planes: planes[a][b][c, n, u, v] = xp[n, u·sy + a, v·sx + b, c]
            hp, wp = xp.shape[1:3]
            hq, wq = -(-hp // sy), -(-wp // sx)
            planes = self.scratch("planes", (sy, sx, p.c, p.n, hq, wq))
            for a in range(sy):
                for b in range(sx):
                    src = xp[:, a::sy, b::sx].transpose(3, 0, 1, 2)
                    np.copyto(planes[a, b, :, :, : src.shape[2], : src.shape[3]], src)
        taps = p.kh * p.kw * p.c
        for images, rows in pieces(p.n, p.out_h, self.row_bytes):
            n, oh = images.stop - images.start, rows.stop - rows.start
            count = n * oh * p.out_w
            with phase("copy"):
                cols_t = self.scratch("cols", (self.depth, count))
                fields = cols_t[:taps].reshape(p.kh, p.kw, p.c, n, oh, p.out_w)
                for i in range(p.kh):
                    a, u = (i * dy) % sy, (i * dy) // sy + rows.start
                    for j in range(p.kw):
                        b, v = (j * dx) % sx, (j * dx) // sx
                        np.copyto(fields[i, j], planes[a, b, :, images, u: u + oh,
                                                       v: v + p.out_w])
                if self.fold_bias:
                    cols_t[taps] = 1.0
            with phase("blas"):
                matmul(cols_t.T, self.b, out=y[images, rows].reshape(count, p.k))

    def _grouped(self, fields: np.ndarray, y: np.ndarray) -> None:
        p = self.problem
        g, cg = p.groups, p.c // p.groups
        rows = y.shape[0]
        split = fields.reshape(*fields.shape[:-1], g, cg)          # ..., KH, KW, G, Cg
        with phase("copy"):
            cols = self.scratch("cols", (g, rows, p.kh * p.kw * cg))
            np.copyto(cols.reshape(g, *fields.shape[:3], p.kh, p.kw, cg),
                      split.transpose(5, 0, 1, 2, 3, 4, 6))
        if cg == 1 and y.shape[2] == 1:   # depthwise: per channel, a dot over the taps
            with phase("elementwise"):
                np.einsum("grt,gt->rg", cols, self.w[:, :, 0], out=y[:, :, 0])
        else:
            product = self.scratch("product", (g, rows, y.shape[2]))
            with phase("blas"):
                matmul(cols, self.w, out=product)
            with phase("copy"):
                y[...] = product.transpose(1, 0, 2)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Im2colGemm:
    return Im2colGemm(p, w_ohwi, bias)
