"""1x1 convolution as one GEMM: (N·OH·OW × C) @ (C × K), the bias folded into it.

With unit stride the NHWC input already is the GEMM's left matrix, so nothing is copied;
a strided 1×1 first subsamples the input (the only workspace), then runs the same GEMM.
The bias costs no pass of its own: when the output is wider than the input (C + 1 < K),
the input is copied with a column of ones next to it and the weights carry the bias as an
extra row (copying N·OH·OW·(C+1) floats is cheaper than touching N·OH·OW·K again);
otherwise the bias is added right after the GEMM
(:func:`~convsel.backends.numpy.blas.gemm_bias`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict, failed
from . import bands
from .blas import gemm_bias
from .common import ITEM, Prepared, as_f32, check_x, float_only, new_output
from .epilogue import cast, finish
from .gemm import matmul, packed
from .profile import phase


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    dtype = float_only(p, "gemm_1x1")
    if dtype.ok and (p.kh, p.kw, p.groups) != (1, 1, 1) or p.pad != (0, 0, 0, 0):
        # the registry's constraint, repeated: this module's GEMM has no other shape
        return failed(f"numpy gemm_1x1 runs ungrouped, unpadded 1x1 kernels, not {p}")
    return dtype


class Gemm1x1(Prepared):
    """``y = x[:, ::sy, ::sx] @ w.T + bias``; no copy of ``x`` at unit stride (F32) unless
    the bias rides along as a column of ones."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.w = as_f32(w_ohwi.reshape(p.k, p.c).T)          # C × K
        self.augmented = bias is not None and p.c + 1 < p.k
        if bias is not None and self.augmented:
            self.w = as_f32(np.vstack([self.w, as_f32(bias)[None]]))   # (C + 1) × K
        strided = p.stride != (1, 1) or p.dilation != (1, 1)
        rows = p.n * p.out_h * p.out_w
        if self.augmented:
            copy = rows * (p.c + 1) * ITEM
        else:
            copy = rows * p.c * ITEM if strided or p.dtype == "F16" else 0
        super().__init__(p, bias, copy)
        # The cpu extra's threaded path (bands of output rows): the plain weights, the bias
        # added per band while it is in cache (no column of ones), strided pixels copied
        # per band.
        self.banded = bands.wanted(self.accelerated)
        self.threads = bands.threads_for(p.flops // 2)
        self.by_columns = rows < bands.COLUMN_SPLIT_MAX_ROWS
        if self.banded:
            self.w = as_f32(w_ohwi.reshape(p.k, p.c).T)
            self.augmented = False
        self.chunk = bands.chunk_units(p.out_w * (p.c + p.k) * ITEM)
        # the whole-layer product's weights, packed once where oneMKL multiplies
        self.b = self.w if self.banded else packed(self.w, rows)

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        x = check_x(p, x)
        rows = p.n * p.out_h * p.out_w
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        if self.banded:
            with phase("pad"):
                x = self.float32(x)
            if self.by_columns:
                self._columns(x, y)
                return finish(p, y, self.bias, True)
            bands.run_bands(lambda start, stop: self._band(x, y, start, stop),
                            p.n * p.out_h, self.chunk, self.threads)
            return cast(p, y)
        if self.augmented:
            with phase("copy"):
                a = self._copy(x, "augmented", ones=True)
            with phase("blas"):
                matmul(a.reshape(rows, p.c + 1), self.b, out=y.reshape(rows, p.k))
        else:
            with phase("copy"):
                if p.stride == (1, 1) or not self.accelerated:
                    x = self.float32(self._subsampled(x))
                else:
                    x = self._copy(x, "subsampled", ones=False)
            gemm_bias(x.reshape(rows, p.c), self.b, self.bias, y.reshape(rows, p.k),
                      self.accelerated)
        return finish(p, y, None, self.accelerated)

    def _band(self, x: np.ndarray, y: np.ndarray, start: int, stop: int) -> None:
        """Output rows [start, stop) (numbered image by image): the GEMM on their pixels
        (copied first when strided), then bias and activation."""
        from .fused.activation import code_of
        from .fused.epilogue import bias_activation
        from .fused.im2col import im2col

        p = self.problem
        for image, first, count in bands.per_image(start, stop, p.out_h):
            pixels = count * p.out_w
            if p.stride == (1, 1):
                a = x[image, first: first + count].reshape(pixels, p.c)
            else:
                band = self.scratch("band", (1, count, p.out_w, p.c))
                im2col(x[image: image + 1], band, first, (1, 1), p.stride, (1, 1), (0, 0),
                       False)
                a = band.reshape(pixels, p.c)
            out = y[image, first: first + count].reshape(pixels, p.k)
            matmul(a, self.w, out=out)
            if self.bias is not None or p.activation is not None:
                bias_activation(out, self.bias, code_of(p.activation))

    def _columns(self, x: np.ndarray, y: np.ndarray) -> None:
        """Few output pixels: the threads take blocks of output channels (the pixels
        copied first when strided); bias and activation follow in one pass."""
        p = self.problem
        rows = p.n * p.out_h * p.out_w
        if p.stride == (1, 1):
            a = x.reshape(rows, p.c)
        else:
            with phase("copy"):
                a = self._copy(x, "subsampled", ones=False).reshape(rows, p.c)
        out = y.reshape(rows, p.k)

        def block(first: int, last: int) -> None:
            matmul(a, self.w[:, first:last], out=out[:, first:last])

        bands.run_columns(block, p.k, self.threads)

    def _subsampled(self, x: np.ndarray) -> np.ndarray:
        """The pixels the strided 1x1 reads (a view)."""
        p = self.problem
        sy, sx = p.stride
        return x[:, : (p.out_h - 1) * sy + 1: sy, : (p.out_w - 1) * sx + 1: sx]

    def _copy(self, x: np.ndarray, name: str, ones: bool) -> np.ndarray:
        """The pixels the 1x1 reads, in a persistent buffer, with a column of ones beside
        them when ``ones`` (one threaded pass with the cpu extra)."""
        p = self.problem
        a = self.scratch(name, (p.n, p.out_h, p.out_w, p.c + ones))
        if self.accelerated:
            from .fused.im2col import im2col

            im2col(self.float32(x), a, 0, (1, 1), p.stride, (1, 1), (0, 0), ones)
            return a
        np.copyto(a[..., : p.c], self._subsampled(x))
        if ones:
            a[..., p.c] = 1.0
        return a


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Gemm1x1:
    return Gemm1x1(p, w_ohwi, bias)
