"""Depthwise convolution in one pass: every tap, the bias and the activation per output row.

numpy needs a padded copy and two passes per tap (a multiply, an add: 17 for a 3x3); here
each output row is computed once, from the unpadded input, with the sum of the taps in a
register, then activated while still in cache. Rows are spread over the threads
(:func:`~convsel.backends.numpy.fused.spread`).

Three loops write a row, all reading the input where it is (no padded copy):

- interior pixels at unit stride with few channels (< FLAT_BELOW): the (pixel, channel)
  values in flat runs of about FLAT_RUN floats, every tap a fixed offset into the input
  row, weights pre-tiled along one run. Long contiguous vectors even with few channels
  (MobileNetV2's first depthwise layer has 32), the tiled weights small enough for L1.
- interior pixels otherwise: per pixel, the channels as the vector, the (KH, KW, C) weights
  read in place.
- pixels whose taps reach into the padding (the border): per pixel and tap, skipping the
  taps outside the input.

Both interior loops compute ROWS output rows at once where stride equals dilation (every
MobileNet unit-stride layer): the rows' sums share each weight load and most input loads
(3x3: 27 loads for 36 multiply-adds, where one row at a time takes two each). On the quiet host
this took the unit-stride layers from 1.06-1.62x torch to 0.94-1.15x (benchmarks/NOTES-cpu.md,
"Depthwise v3"). oneDNN's JIT depthwise kernel does the same along a row (``ur_w`` output
pixels in registers, each weight load feeding all of them); here the block runs down the
columns instead, because LLVM did not vectorise pixel blocks with a run-time channel stride.

Timings that chose this (one thread of the development machine's AVX-512 core, ms; numpy's
17-pass version in brackets): 112x112x32 0.22 (1.18), 56x56x144 0.26 (1.28), 14x14x576
0.08 (0.32). A tap-by-tap row pass, the first version, was twice as slow as the register
accumulator: it reads and writes the row once per tap.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numba import uintp

from . import jit, spread
from .activation import activate


@jit()
def _clipped(x: np.ndarray, w: np.ndarray, bias: np.ndarray, row: np.ndarray, oy: int,
             lo: int, hi: int, sy: int, sx: int, dy: int, dx: int, top: int, left: int,
             ) -> None:
    """Pixels [lo, hi) of output row ``oy`` of image ``x`` (H, W, C), taps in the padding
    skipped: the border, where a row's or a column's taps are partly outside the input."""
    h, wd, c = x.shape
    kh, kw = w.shape[0], w.shape[1]
    for ox in range(lo, hi):
        o = row[ox * c:(ox + 1) * c]
        for ch in range(c):
            o[ch] = bias[ch]
        for ky in range(kh):
            iy = oy * sy - top + ky * dy
            if iy < 0 or iy >= h:
                continue
            for kx in range(kw):
                ix = ox * sx - left + kx * dx
                if ix < 0 or ix >= wd:
                    continue
                xs = x[iy, ix]
                ws = w[ky, kx]
                for ch in range(c):
                    o[ch] += xs[ch] * ws[ch]


# Kernel sizes compiled with their tap loops unrolled (about 5 s of compile time each, once
# per machine with numba's cache); other sizes share one kernel with the taps as run-time
# loops (the border loop for every pixel: about 2-3x slower, still well ahead of numpy).
UNROLLED = ((3, 3), (5, 5), (7, 7))

# Unit stride, fewer channels than this: the flat (pixel, channel) loop; more: pixel by pixel.
# A few channels make short vectors per pixel (32: four AVX2 loads), so the flat loop wins
# there; from 144 channels up the per-pixel loop, whose weights are one (KH, KW, C) block,
# ran 0.78-0.92x the flat one on the quiet host (2 threads; 56x56x144 0.283 against 0.302
# ms, 14x14x576 0.103 against 0.121).
FLAT_BELOW = 128
# The flat loop's weights are tiled along a run of about this many floats, not the whole
# row: 9 taps x 512 floats is 18 KB, in L1, where a whole tiled row was 129 KB at
# 112x112x32 (L2). Quiet host, 112x112x32, 2 threads: 0.315 ms against 0.350 for whole
# rows (0.403 with 1024-float runs) in one probe; within the noise (0.398 against 0.385) in
# the full-net run (benchmarks/NOTES-cpu.md, "Depthwise v2").
FLAT_RUN = 512
# Interior output rows computed together: the four rows' sums share each weight load and,
# at unit stride, most input loads (3x3: 27 loads for 36 multiply-adds, against 72 a row
# at a time). LLVM still vectorises the channel (or flat) loop with four output streams;
# with eight (4 rows x 2 pixels) it no longer did. Development machine, one thread, 256-bit
# vectors (numba for icelake-server), interior only, ms, one row / four rows: 112x112x32
# (flat) 0.270 / 0.132, 56x56x144 0.241 / 0.138, 28x28x192 0.078 / 0.046.
# Six or eight rows: not vectorised any more (scalar FMAs, 4x slower).
ROWS = 4


@jit()
def _any_size(start: int, stop: int,
              x: np.ndarray, w: np.ndarray, w_rows: np.ndarray, bias: np.ndarray,
              bias_row: np.ndarray, out: np.ndarray, sy: int, sx: int, dy: int, dx: int,
              top: int, left: int, code: int, a: np.float32, b: np.float32) -> None:
    n, oh, ow = out.shape[0], out.shape[1], out.shape[2]
    of = out.reshape(n, oh, ow * out.shape[3])
    for job in range(start, stop):
        i = job // oh
        oy = job - i * oh
        row = of[i, oy]
        _clipped(x[i], w, bias, row, oy, 0, ow, sy, sx, dy, dx, top, left)
        activate(row, code, a, b)


def kernel(kh: int, kw: int) -> Callable[..., None]:
    """The compiled depthwise kernel for ``kh`` x ``kw`` taps."""
    return _unrolled(kh, kw) if (kh, kw) in UNROLLED else _any_size


@cache
def _unrolled(kh: int, kw: int) -> Callable[..., None]:
    """The kernel for ``kh`` x ``kw`` taps with the tap loops unrolled at compile time (so
    the sums of the taps stay in registers)."""

    @jit()
    def depthwise(start: int, stop: int,
                  x: np.ndarray, w: np.ndarray, w_rows: np.ndarray, bias: np.ndarray,
                  bias_row: np.ndarray, out: np.ndarray, sy: int, sx: int, dy: int, dx: int,
                  top: int, left: int, code: int, a: np.float32, b: np.float32) -> None:
        n, h, wd, c = x.shape
        oh, ow = out.shape[1], out.shape[2]
        # output columns whose every tap is inside the input: [lo, hi); rows: [ylo, yhi)
        lo = min(ow, (left + sx - 1) // sx)
        hi = max(lo, min(ow, (wd - 1 + left - (kw - 1) * dx) // sx + 1))
        ylo = min(oh, (top + sy - 1) // sy)
        yhi = max(ylo, min(oh, (h - 1 + top - (kh - 1) * dy) // sy + 1))
        xf = x.reshape(n, h * wd * c)
        of = out.reshape(n, oh, ow * c)
        wf = w.reshape(kh * kw * c)
        wr = w_rows.reshape(w_rows.size)
        chunk = w_rows.shape[1]   # output pixels per flat run
        width = uintp(chunk * c)
        uc, urow, ucol = uintp(c), uintp(dy * wd * c), uintp(dx * c)
        # four rows at once where the next output row's input is the next tap row's (stride
        # = dilation): the rows share their loads. The offsets are written as (tap row + r)
        # times the row: LLVM did not vectorise the same sums written as offset + r rows.
        block = ROWS if sy == dy else 1
        flat = sx == 1 and c < FLAT_BELOW
        job = start
        while job < stop:
            i = job // oh
            oy = job - i * oh
            if oy < ylo or oy >= yhi or lo == hi:   # a row whose taps reach the padding
                row = of[i, oy]
                _clipped(x[i], w, bias, row, oy, 0, ow, sy, sx, dy, dx, top, left)
                activate(row, code, a, b)
                job += 1
                continue
            rows = block if min(yhi - oy, stop - job) >= block else 1
            iy0 = oy * sy - top
            r0 = of[i, oy]
            if rows > 1:
                r1, r2, r3 = of[i, oy + 1], of[i, oy + 2], of[i, oy + 3]
                if flat:   # interior as flat runs of (pixel, channel), 4 rows at once
                    for ox0 in range(lo, hi, chunk):
                        m = uintp((min(hi, ox0 + chunk) - ox0) * c)
                        o0, o1, o2, o3 = r0[ox0 * c:], r1[ox0 * c:], r2[ox0 * c:], r3[ox0 * c:]
                        xs = xf[i, (iy0 * wd + ox0 - left) * c:]
                        for j in range(m):
                            a0 = bias_row[j]
                            a1, a2, a3 = a0, a0, a0
                            for ky in range(kh):
                                for kx in range(kw):
                                    wv = wr[uintp(ky * kw + kx) * width + j]
                                    a0 += xs[uintp(ky) * urow + uintp(kx) * ucol + j] * wv
                                    a1 += xs[uintp(ky + 1) * urow + uintp(kx) * ucol + j] * wv
                                    a2 += xs[uintp(ky + 2) * urow + uintp(kx) * ucol + j] * wv
                                    a3 += xs[uintp(ky + 3) * urow + uintp(kx) * ucol + j] * wv
                            o0[j] = a0
                            o1[j] = a1
                            o2[j] = a2
                            o3[j] = a3
                else:   # interior pixel by pixel, channels as the vector, 4 rows at once
                    for ox in range(lo, hi):
                        o0, o1, o2, o3 = r0[ox * c:], r1[ox * c:], r2[ox * c:], r3[ox * c:]
                        xs = xf[i, (iy0 * wd + ox * sx - left) * c:]
                        for ch in range(uc):
                            a0 = bias[ch]
                            a1, a2, a3 = a0, a0, a0
                            for ky in range(kh):
                                for kx in range(kw):
                                    wv = wf[uintp(ky * kw + kx) * uc + ch]
                                    a0 += xs[uintp(ky) * urow + uintp(kx) * ucol + ch] * wv
                                    a1 += xs[uintp(ky + 1) * urow + uintp(kx) * ucol + ch] * wv
                                    a2 += xs[uintp(ky + 2) * urow + uintp(kx) * ucol + ch] * wv
                                    a3 += xs[uintp(ky + 3) * urow + uintp(kx) * ucol + ch] * wv
                            o0[ch] = a0
                            o1[ch] = a1
                            o2[ch] = a2
                            o3[ch] = a3
            elif flat:   # one row: flat runs
                for ox0 in range(lo, hi, chunk):
                    m = uintp((min(hi, ox0 + chunk) - ox0) * c)
                    o = r0[ox0 * c:]
                    xs = xf[i, (iy0 * wd + ox0 - left) * c:]
                    for j in range(m):
                        acc = bias_row[j]
                        for ky in range(kh):
                            for kx in range(kw):
                                acc += (xs[uintp(ky) * urow + uintp(kx) * ucol + j]
                                        * wr[uintp(ky * kw + kx) * width + j])
                        o[j] = acc
            else:   # one row, pixel by pixel
                for ox in range(lo, hi):
                    o = r0[ox * c:(ox + 1) * c]
                    xs = xf[i, (iy0 * wd + ox * sx - left) * c:]
                    for ch in range(uc):
                        acc = bias[ch]
                        for ky in range(kh):
                            for kx in range(kw):
                                acc += (xs[uintp(ky) * urow + uintp(kx) * ucol + ch]
                                        * wf[uintp(ky * kw + kx) * uc + ch])
                        o[ch] = acc
            for r in range(rows):   # the border columns, then the activation, row by row
                row = of[i, oy + r]
                _clipped(x[i], w, bias, row, oy + r, 0, lo, sy, sx, dy, dx, top, left)
                _clipped(x[i], w, bias, row, oy + r, hi, ow, sy, sx, dy, dx, top, left)
                activate(row, code, a, b)
            job += rows

    return depthwise   # type: ignore[no-any-return]


class Depthwise:
    """A depthwise layer's weights laid out for :func:`kernel`: (KH, KW, C) taps, the taps
    tiled along a flat run of output pixels (unit stride, few channels), the bias (zeros
    without one) likewise."""

    def __init__(self, taps_hwc: np.ndarray, bias: np.ndarray | None, out_w: int,
                 stride: tuple[int, int], dilation: tuple[int, int], pad_top_left: tuple[int, int],
                 activation: tuple[int, np.float32, np.float32]) -> None:
        kh, kw, c = taps_hwc.shape
        self.w = np.ascontiguousarray(taps_hwc, dtype=np.float32)
        self.bias = (np.zeros(c, np.float32) if bias is None
                     else np.ascontiguousarray(bias, dtype=np.float32))
        # only the flat loop reads the tiled runs; the others use the (KH, KW, C) taps but
        # take the run length (pixels) from w_rows' shape, so theirs is one pixel
        run = (max(1, min(out_w, FLAT_RUN // c)) if stride[1] == 1 and c < FLAT_BELOW
               else 1)
        self.w_rows = np.ascontiguousarray(np.tile(self.w.reshape(kh * kw, 1, c), (1, run, 1)))
        self.bias_row = np.tile(self.bias, run)
        self.args = (*stride, *dilation, *pad_top_left, *activation)
        self.run: Callable[..., Any] = kernel(kh, kw)

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out`` (N, OH, OW, C) = the activated depthwise convolution of ``x`` (N, H, W, C),
        both float32 and contiguous."""
        jobs = out.shape[0] * out.shape[1]
        spread(self.run, jobs, out.size, x, self.w, self.w_rows, self.bias, self.bias_row, out,
               *self.args)
