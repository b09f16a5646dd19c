"""Winograd's input and output transforms in one pass each, from and to NHWC directly.

The pure numpy path pads the input, gathers every tile into a matrix, multiplies it by the
Kronecker transform in BLAS (36 multiply-adds per value for F(4x4, 3x3)), and after the
per-position GEMMs does the same backwards plus one strided copy per tile position. Here
the calling thread (as every kernel next to a GEMM: :func:`~convsel.backends.numpy.fused.
spread`) takes a row of tiles at a time:

- input: copies the row's tile pixels (zeros outside the image: no padded copy) into a
  cache-resident buffer laid out (tile row, tile column, tile, channel), applies the
  separable transform ``BT_y · d · BT_x^T`` (skipping zero coefficients), and writes each
  position's values straight into V's (position, tile, C) layout, which the GEMMs read;
- output: applies ``AT_y · m · AT_x^T`` to the row's GEMM results, then writes the output
  pixels with the bias into y, clipped at the output's edge; the activation follows while
  the rows are in cache.

Every multiply-add loop runs over a whole row of tiles' (tile, channel) values at once:
a tile's own channel vectors (64 long in ResNet's first stage) made the loops so short
that entering them cost more than their work (1.2 ms against numpy's 1.07 ms for the
56x56x64 F(4x4) transforms, one thread). The transforms are small float32 arrays passed
in, so one compiled kernel serves every tile size.
"""

from __future__ import annotations

import numpy as np
from numba import uintp

from ....winograd_transforms import winograd_matrices_2d
from . import alone, jit
from .activation import activate


@jit()
def _combine(out: np.ndarray, src: np.ndarray, offsets: np.ndarray, coefs: np.ndarray) -> None:
    """``out[j] = Σ_t coefs[t] · src[offsets[t] + j]``, four terms per pass over ``out``
    (the term lists are padded to a multiple of four with zero coefficients)."""
    n = uintp(out.size)
    for g in range(0, offsets.size, 4):
        o0, o1, o2, o3 = (uintp(offsets[g]), uintp(offsets[g + 1]), uintp(offsets[g + 2]),
                          uintp(offsets[g + 3]))
        c0, c1, c2, c3 = coefs[g], coefs[g + 1], coefs[g + 2], coefs[g + 3]
        if g == 0:
            for j in range(n):
                out[j] = (c0 * src[o0 + j] + c1 * src[o1 + j]
                          + c2 * src[o2 + j] + c3 * src[o3 + j])
        else:
            for j in range(n):
                out[j] += (c0 * src[o0 + j] + c1 * src[o1 + j]
                           + c2 * src[o2 + j] + c3 * src[o3 + j])


@jit()
def _input_transform(start: int, stop: int,
                     x: np.ndarray, v: np.ndarray, by_index: np.ndarray, by: np.ndarray,
                     bx_index: np.ndarray, bx: np.ndarray, first_row: int, rows: int, tw: int,
                     my: int, mx: int, top: int, left: int) -> None:
    images, h, wd, c = x.shape
    ny, nx = by.shape[0], bx.shape[0]   # BT is square: rows = the input tile's side
    tiles = v.shape[1]
    run = tw * c                                          # one row of tiles' (tile, channel)
    vf = v.reshape(v.size)
    for job in range(start, stop):
        i = job // rows
        r = job - i * rows
        d = np.empty((ny, nx, run), dtype=np.float32)     # the row's tiles' pixels
        t = np.empty((ny, nx, run), dtype=np.float32)     # BT_y · d
        offsets = np.empty(max(by_index.shape[1], bx_index.shape[1]), dtype=np.int64)
        y0 = (first_row + r) * my - top
        for a in range(ny):
            iy = y0 + a
            for b in range(nx):
                dst = d[a, b]
                if iy < 0 or iy >= h:
                    dst[:] = 0.0
                    continue
                for tj in range(tw):
                    ix = tj * mx - left + b
                    part = dst[tj * c:(tj + 1) * c]
                    if ix < 0 or ix >= wd:
                        part[:] = 0.0
                    else:
                        src = x[i, iy, ix]
                        for ch in range(c):
                            part[ch] = src[ch]
        df, tf = d.reshape(d.size), t.reshape(ny, nx * run)
        terms = by_index.shape[1]
        for a2 in range(ny):
            for q in range(terms):
                offsets[q] = by_index[a2, q] * nx * run
            _combine(tf[a2], df, offsets[:terms], by[a2])
        tflat = t.reshape(t.size)
        first_tile = job * tw
        terms = bx_index.shape[1]
        for a2 in range(ny):
            for b2 in range(nx):
                for q in range(terms):
                    offsets[q] = (a2 * nx + bx_index[b2, q]) * run
                start = ((a2 * nx + b2) * tiles + first_tile) * c
                _combine(vf[start:start + run], tflat, offsets[:terms], bx[b2])


@jit()
def _output_transform(start: int, stop: int,
                      m: np.ndarray, y: np.ndarray, ay_index: np.ndarray, ay: np.ndarray,
                      ax_index: np.ndarray, ax: np.ndarray, nx: int, bias: np.ndarray,
                      first_row: int, rows: int, tw: int, code: int, a: np.float32,
                      b: np.float32) -> None:
    images, oh, ow, k = y.shape
    my, mx = ay.shape[0], ax.shape[0]
    tiles = m.shape[1]
    run = tw * k
    mf = m.reshape(m.size)
    for job in range(start, stop):
        i = job // rows
        r = job - i * rows
        t = np.empty((my, nx, run), dtype=np.float32)     # AT_y · m
        o = np.empty((my, mx, run), dtype=np.float32)     # the row's output tiles
        offsets = np.empty(max(ay_index.shape[1], ax_index.shape[1]), dtype=np.int64)
        first_tile = job * tw
        terms = ay_index.shape[1]
        for a2 in range(my):
            for b1 in range(nx):
                for q in range(terms):
                    offsets[q] = ((ay_index[a2, q] * nx + b1) * tiles + first_tile) * k
                _combine(t[a2, b1], mf, offsets[:terms], ay[a2])
        tflat = t.reshape(t.size)
        terms = ax_index.shape[1]
        for a2 in range(my):
            for b2 in range(mx):
                for q in range(terms):
                    offsets[q] = (a2 * nx + ax_index[b2, q]) * run
                _combine(o[a2, b2], tflat, offsets[:terms], ax[b2])
        oy0 = (first_row + r) * my
        for a2 in range(my):
            oy = oy0 + a2
            if oy >= oh:
                break
            for tj in range(tw):
                for b2 in range(mx):
                    ox = tj * mx + b2
                    if ox >= ow:
                        break
                    out = y[i, oy, ox]
                    src = o[a2, b2, tj * k:(tj + 1) * k]
                    for ch in range(k):
                        out[ch] = src[ch] + bias[ch]
        stop = min(oh, oy0 + my)
        if stop > oy0:
            activate(y[i, oy0:stop].reshape((stop - oy0) * ow * k), code, a, b)


def _terms(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nonzero coefficients and their column indices, padded to a multiple of
    four with zero coefficients on the row's first index (so a padding term reads values
    the row reads anyway: NaN spreads no further than the transform itself takes it)."""
    rows = [np.flatnonzero(row) for row in matrix]
    width = max(4, -(-max(len(r) for r in rows) // 4) * 4)
    index = np.zeros((len(rows), width), dtype=np.int64)
    coefs = np.zeros((len(rows), width), dtype=np.float32)
    for i, cols in enumerate(rows):
        index[i, : len(cols)] = cols
        index[i, len(cols):] = cols[0] if len(cols) else 0
        coefs[i, : len(cols)] = matrix[i, cols]
    return index, coefs


class Transforms:
    """F(tile, kernel)'s per-axis transforms as float32 arrays for the fused kernels."""

    def __init__(self, tile: tuple[int, int], kernel: tuple[int, int]) -> None:
        (at_y, _, bt_y), (at_x, _, bt_x) = winograd_matrices_2d(tile, kernel)
        self.tile = tile
        self.nx = bt_x.shape[0]
        self.by, self.bx, self.ay, self.ax = (_terms(m) for m in (bt_y, bt_x, at_y, at_x))

    def forward(self, x: np.ndarray, v: np.ndarray, first_row: int, rows: int, tw: int,
                pad_top_left: tuple[int, int]) -> None:
        """V (ny·nx, images·rows·tw, C) of tile rows ``first_row``... of ``x`` (images, H,
        W, C), float32 and contiguous."""
        alone(_input_transform, x.shape[0] * rows, x, v, *self.by, *self.bx, first_row, rows,
              tw, *self.tile, *pad_top_left)

    def backward(self, m: np.ndarray, y: np.ndarray, bias: np.ndarray, first_row: int,
                 rows: int, tw: int, activation: tuple[int, np.float32, np.float32]) -> None:
        """Output rows of tile rows ``first_row``... into ``y`` (images, OH, OW, K) from the
        GEMMs' M (ny·nx, images·rows·tw, K): transform, bias, activation."""
        alone(_output_transform, y.shape[0] * rows, m, y, *self.ay, *self.ax, self.nx, bias,
              first_row, rows, tw, *activation)
