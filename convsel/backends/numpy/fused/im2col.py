"""im2col straight from the unpadded input into the GEMM's left matrix, in one pass.

The pure numpy path first copies the input into a zero-padded buffer, then copies each
receptive field out of it; here every row of the matrix (one output pixel: KH runs of
KW·C values, then a 1 for the bias column when there is one) is written once, zeros where a
run reaches into the padding, in the calling thread (the GEMM's threads have the other
cores: :func:`~convsel.backends.numpy.fused.spread`).
"""

from __future__ import annotations

import numpy as np
from numba import uintp

from . import alone, jit


@jit()
def _im2col(start: int, stop: int,
            x: np.ndarray, cols: np.ndarray, first_row: int, kh: int, kw: int, sy: int,
            sx: int, dy: int, dx: int, top: int, left: int, ones: bool) -> None:
    n, h, wd, c = x.shape
    images, oh, ow, depth = cols.shape
    run = kw * c
    src = x.reshape(x.size)
    dst = cols.reshape(cols.size)
    urun, uc = uintp(run), uintp(c)
    for job in range(start, stop):
        i = job // oh
        oy = job - i * oh
        for ox in range(ow):
            base = uintp((job * ow + ox) * depth)
            ix0 = ox * sx - left
            whole = ix0 >= 0 and ix0 + (kw - 1) * dx < wd and dx == 1
            for ky in range(kh):
                iy = (first_row + oy) * sy - top + ky * dy
                at = base + uintp(ky) * urun
                if iy < 0 or iy >= h:
                    for j in range(urun):
                        dst[at + j] = 0.0
                elif whole:   # one contiguous run of KW·C values
                    frm = uintp(((i * h + iy) * wd + ix0) * c)
                    for j in range(urun):
                        dst[at + j] = src[frm + j]
                else:
                    for kx in range(kw):
                        ix = ix0 + kx * dx
                        part = at + uintp(kx) * uc
                        if ix < 0 or ix >= wd:
                            for j in range(uc):
                                dst[part + j] = 0.0
                        else:
                            frm = uintp(((i * h + iy) * wd + ix) * c)
                            for j in range(uc):
                                dst[part + j] = src[frm + j]
            if ones:
                dst[base + uintp(kh) * urun] = 1.0


def im2col(x: np.ndarray, cols: np.ndarray, first_row: int, kernel: tuple[int, int],
           stride: tuple[int, int], dilation: tuple[int, int], pad_top_left: tuple[int, int],
           ones: bool) -> None:
    """Fill ``cols`` (images, rows, OW, KH·KW·C [+ 1]) with the receptive fields of output
    rows ``first_row``... of the images ``x`` (images, H, W, C), float32 and contiguous; the
    last column 1 when ``ones`` (the bias rides in the GEMM)."""
    alone(_im2col, cols.shape[0] * cols.shape[1], x, cols, first_row, *kernel, *stride,
          *dilation, *pad_top_left, ones)
