"""FFT convolution (scipy.fft), tiled: overlap-save blocks of the input, a per-frequency
complex GEMM over channels, inverse FFT.

The padded input is cut into overlapping blocks of F = t + e - 1 pixels per axis (t output
rows/cols per block, e the dilated kernel extent; F a fast FFT length), so the filter's
spectrum has F·(F/2+1)·C·K entries whatever the image size. Correlation is the inverse FFT
of ``X · conj(W)``, whose first t outputs per block are valid. Dilation zero-inserts the
kernel (free in the frequency domain); stride computes the unit-stride output and subsamples.
The filter FFT is done once, at prepare time. Problems whose spectra would exceed
``WORKSPACE_CAP`` run in bands of block rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.fft
from numpy.lib.stride_tricks import sliding_window_view

from ...algorithms.fft import MIN_FFT
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from .common import (
    Prepared,
    ceil_div,
    check_x,
    float_only,
    new_output,
    piece_bytes,
    pieces,
)
from .epilogue import finish
from .profile import phase
from .threads import thread_count

MAX_SPECTRUM_BYTES = 1 << 30  # the filter spectrum (complex64) must fit this


def _block(out: int, extent: int) -> tuple[int, int]:
    """(FFT length, valid outputs per block) for one axis."""
    want = min(out + extent - 1, max(MIN_FFT, 2 * extent))
    size = scipy.fft.next_fast_len(want, real=True)
    return size, size - extent + 1


def _plan(p: ConvProblem) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """FFT sizes, valid outputs per block and block counts, per axis."""
    ext = p.kernel_extent
    full = ((p.out_h - 1) * p.stride[0] + 1, (p.out_w - 1) * p.stride[1] + 1)  # unit-stride
    (fy, ty), (fx, tx) = _block(full[0], ext[0]), _block(full[1], ext[1])
    return (fy, fx), (ty, tx), (ceil_div(full[0], ty), ceil_div(full[1], tx))


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    dtype = float_only(p, "fft")
    if not dtype.ok:
        return dtype
    if p.groups != 1:
        return failed(f"numpy fft does not run grouped convolution (groups={p.groups})")
    (fy, fx), _, _ = _plan(p)
    spectrum = fy * (fx // 2 + 1) * p.c * p.k * 8
    if spectrum > MAX_SPECTRUM_BYTES:
        return failed(f"numpy fft: the filter spectrum would take {spectrum / 2**20:.0f} MiB "
                      f"(C={p.c}, K={p.k}, blocks {fy}x{fx}), over the "
                      f"{MAX_SPECTRUM_BYTES >> 20} MiB limit")
    return dtype


class Fft(Prepared):
    """Overlap-save FFT convolution with the filter spectrum (F, C, K) ready."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.size, self.valid, self.blocks = _plan(p)
        (fy, fx), (ey, ex) = self.size, p.kernel_extent
        dilated = np.zeros((p.k, p.c, ey, ex), dtype=np.float32)
        dilated[:, :, :: p.dilation[0], :: p.dilation[1]] = np.asarray(
            w_ohwi, dtype=np.float32).transpose(0, 3, 1, 2)
        spectrum = scipy.fft.rfft2(dilated, s=(fy, fx), workers=thread_count())   # K, C, fy, fx'
        self.w = np.ascontiguousarray(np.conj(spectrum).transpose(2, 3, 1, 0)).reshape(
            -1, p.c, p.k)                                                  # F, C, K
        freqs = self.w.shape[0]
        self.row_bytes = self.blocks[1] * (   # per row of blocks: complex64 spectra of the
            8 * freqs * (2 * p.c + 2 * p.k)   # input (and transposed), of the product (twice)
            + 4 * fy * fx * p.k * 2)          # and the real inverse, before and after the crop
        padded_in = p.n * (self.blocks[0] * self.valid[0] + ey - 1) * (
            self.blocks[1] * self.valid[1] + ex - 1) * p.c * 4
        super().__init__(p, bias, padded_in + piece_bytes(p.n, self.blocks[0], self.row_bytes))

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        (fy, fx), (ty, tx), (by, bx) = self.size, self.valid, self.blocks
        ey, ex = p.kernel_extent
        top, left = p.pad[0], p.pad[2]
        xp = self.padded(check_x(p, x), top, by * ty + ey - 1 - p.h - top,
                    left, bx * tx + ex - 1 - p.w - left)
        blocks = sliding_window_view(xp, (fy, fx), axis=(1, 2))[:, ::ty, ::tx]  # N,BY,BX,C,fy,fx
        sy, sx = p.stride
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        for images, rows in pieces(p.n, by, self.row_bytes):
            # output rows whose unit-stride row lies in this band's [start*ty, stop*ty)
            first = ceil_div(rows.start * ty, sy)
            last = min(p.out_h, ceil_div(rows.stop * ty, sy))
            if first >= last:
                continue
            full = self._blocks(blocks[images, rows])
            skip = first * sy - rows.start * ty
            with phase("copy"):
                np.copyto(y[images, first:last],
                          full[:, skip: skip + (last - first - 1) * sy + 1: sy,
                               : (p.out_w - 1) * sx + 1: sx])
        return finish(p, y, self.bias, self.accelerated)

    def _blocks(self, blocks: np.ndarray) -> np.ndarray:
        """Unit-stride outputs (n, rows·ty, BX·tx, K) of input blocks (n, rows, BX, C, fy, fx)."""
        p = self.problem
        (fy, fx), (ty, tx) = self.size, self.valid
        n, rows, bx = blocks.shape[:3]
        with phase("fft"):
            spectra = scipy.fft.rfft2(blocks, axes=(-2, -1), workers=thread_count())
        count = n * rows * bx
        with phase("copy"):
            grid = np.ascontiguousarray(spectra.reshape(count, p.c, -1).transpose(2, 0, 1))
        with phase("blas"):
            product = np.matmul(grid, self.w)                            # F, P, K
        with phase("fft"):
            product = product.transpose(1, 2, 0).reshape(count, p.k, fy, fx // 2 + 1)
            spatial = scipy.fft.irfft2(product, s=(fy, fx), workers=thread_count())[..., :ty, :tx]
        full = spatial.reshape(n, rows, bx, p.k, ty, tx).transpose(0, 1, 4, 2, 5, 3)
        return full.reshape(n, rows * ty, bx * tx, p.k)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Fft:
    return Fft(p, w_ohwi, bias)
