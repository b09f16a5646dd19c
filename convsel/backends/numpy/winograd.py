"""Winograd F(tile, kernel): transform tiles, multiply in the transformed domain, transform back.

The padded input is cut into overlapping tiles of (my + kh - 1) × (mx + kw - 1) pixels with
step (my, mx) (a ``sliding_window_view``, nothing copied until the gather). With the
2-D transforms flattened to Kronecker matrices (:mod:`convsel.winograd_transforms`), every
step is one BLAS call on a large matrix:

    V = BT @ D           D: (T, P·C)   the gathered tiles, T = tile positions, P = tiles
    M = V @ U            batched over T: (P × C) @ (C × K); U = G g Gᵀ made at prepare time
    Y = AT @ M           (my·mx, P·K), then scattered into the output

F(4×4, 3×3) does 36 multiplies per 16 outputs and input channel where direct does 144.
But U holds 36·C·K values, 4× the weights: at batch 1 on small maps (14×14, 7×7) the GEMMs
have few rows, reading U dominates, and im2col's one GEMM over the plain weights wins.
Problems whose tile buffers would exceed ``WORKSPACE_CAP`` run in bands of tile rows.

The Kronecker transforms stay single GEMMs: with 36-long contractions BLAS runs them faster
than the separable form's two passes of 6-long ones (measured on the 56x56 ResNet layers).
The bias is added by the final scatter copy (one strided copy per position of the output
tile, straight into the output), which writes every output once anyway. Spreading bands of
tiles, or the batch of GEMMs, over a thread pool (BLAS single-threaded meanwhile) was tried
and was 1.3x slower on two cores: the copies and small GEMMs are short, and the threads queue
for the GIL between them, while BLAS's own threads already cover the large GEMMs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from ...winograd_transforms import tile_verdict, winograd_kron_2d
from . import accel, bands
from .common import (
    F32,
    ITEM,
    Prepared,
    as_f32,
    ceil_div,
    check_x,
    float_only,
    new_output,
    piece_bytes,
    pieces,
)
from .epilogue import cast, finish
from .gemm import matmul
from .profile import phase

TRANSPOSE_MAX_TILES = 16   # tiles per run up to which the GEMMs run transposed (see __init__)


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    dtype = float_only(p, "winograd")
    if not dtype.ok:
        return dtype
    if params.get("math") is not None:
        return failed(f"numpy winograd has no tensor cores: math={params['math']!r} runs on "
                      "the opencl backend, on NVIDIA GPUs")
    return tile_verdict(p, params, "numpy")


class Winograd(Prepared):
    """F(tile, kernel) with the filter already transformed: U is (T, C, K) float32."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
                 tile: tuple[int, int]) -> None:
        self.tile = tile
        self.inner = (tile[0] + p.kh - 1, tile[1] + p.kw - 1)   # input tile (ny, nx)
        at, g, bt = winograd_kron_2d(tile, (p.kh, p.kw))
        self.at, self.bt = as_f32(at), as_f32(bt)
        # U[t] = (G g Gᵀ) flattened, for every (c, k): computed in float64, stored float32.
        w = np.asarray(w_ohwi, dtype=np.float64).reshape(p.k, p.kh * p.kw, p.c)
        self.tiles = (ceil_div(p.out_h, tile[0]), ceil_div(p.out_w, tile[1]))
        # With few tiles the per-position GEMMs have few rows; OpenBLAS then runs the
        # transposed product Mᵀ = Uᵀ Vᵀ 5-15% faster (7x7 and 14x14 maps at batch 1), and
        # slower with 49 tiles or more (measured, one thread).
        # The fused transforms (the cpu extra) read M as (position, tile, K) only.
        accelerated = accel.enabled()
        self.transposed = (not accelerated
                           and p.n * self.tiles[0] * self.tiles[1] <= TRANSPOSE_MAX_TILES)
        order = "tkc" if self.transposed else "tck"
        self.u = as_f32(np.einsum(f"ts,ksc->{order}", g, w))
        positions = self.inner[0] * self.inner[1]
        hp, wp = self._padded_size(p)
        self.row_bytes = self.tiles[1] * ITEM * (   # per row of tiles:
            2 * positions * p.c                     # the gathered tiles D and V = BT D
            + positions * p.k                       # M = V U
            + tile[0] * tile[1] * p.k)              # Y = AT M, before the scatter
        work = p.n * hp * wp * p.c * ITEM + piece_bytes(p.n, self.tiles[0], self.row_bytes)
        super().__init__(p, bias, work)
        self.accelerated = accelerated
        # With the cpu extra: the transforms read the unpadded input and write the output
        # directly (no padded copy, no D or output-tile buffers); the workspace claimed above
        # is then an upper bound, kept so that the pure estimate holds either way.
        self.transforms = None
        if accelerated:
            from .fused.winograd import Transforms

            self.transforms = Transforms(tile, (p.kh, p.kw))
            self.fused_bias = self.bias if self.bias is not None else np.zeros(p.k, F32)
        # ...and, where it measured faster, in bands of tile rows over the threads
        self.banded = self.transforms is not None and bands.wanted(accelerated)
        self.threads = bands.threads_for(
            p.n * self.tiles[0] * self.tiles[1] * positions * p.c * p.k)
        self.chunk = bands.chunk_units(self.tiles[1] * positions * (p.c + p.k) * ITEM)

    def _padded_size(self, p: ConvProblem | None = None) -> tuple[int, int]:
        p = p or self.problem
        return (self.tiles[0] * self.tile[0] + p.kh - 1, self.tiles[1] * self.tile[1] + p.kw - 1)

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.transforms is not None:
            return self._fused(x)
        p = self.problem
        (my, mx), (ny, nx), th = self.tile, self.inner, self.tiles[0]
        hp, wp = self._padded_size()
        top, left = p.pad[0], p.pad[2]
        with phase("pad"):
            xp = self.padded(check_x(p, x), top, hp - p.h - top, left, wp - p.w - left)
        windows = sliding_window_view(xp, (ny, nx), axis=(1, 2))[:, ::my, ::mx]  # N,TH,TW,C,ny,nx
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        for images, rows in pieces(p.n, th, self.row_bytes):
            self._tiles(windows[images, rows], y[images, rows.start * my: rows.stop * my])
        return finish(p, y, None, self.accelerated)

    def _fused(self, x: np.ndarray) -> np.ndarray:
        """The cpu extra's path: fused transforms around the same per-position GEMMs."""
        from .fused.activation import code_of

        p = self.problem
        assert self.transforms is not None
        (ny, nx), (th, tw) = self.inner, self.tiles
        with phase("pad"):
            x = self.float32(check_x(p, x))
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        activation = code_of(p.activation)
        if self.banded:
            bands.run_bands(lambda start, stop: self._band(x, y, start, stop, activation),
                            p.n * th, self.chunk, self.threads)
            return cast(p, y)
        for images, rows in pieces(p.n, th, self.row_bytes):
            n, count = images.stop - images.start, rows.stop - rows.start
            tiles = n * count * tw
            v = self.scratch("v", (ny * nx, tiles, p.c))
            with phase("fused"):
                self.transforms.forward(x[images], v, rows.start, count, tw,
                                        (p.pad[0], p.pad[2]))
            m = self.scratch("m", (ny * nx, tiles, p.k))
            with phase("blas"):
                matmul(v, self.u, out=m)
            with phase("fused"):
                self.transforms.backward(m, y[images], self.fused_bias, rows.start, count, tw,
                                         activation)
        return cast(p, y)

    def _band(self, x: np.ndarray, y: np.ndarray, start: int, stop: int,
              activation: tuple[int, np.float32, np.float32]) -> None:
        """Tile rows [start, stop) (numbered image by image): input transform into this
        thread's V, the per-position GEMMs, output transform with bias and activation."""
        p = self.problem
        assert self.transforms is not None
        (ny, nx), tw = self.inner, self.tiles[1]
        for image, first, count in bands.per_image(start, stop, self.tiles[0]):
            v = self.scratch("band_v", (ny * nx, count * tw, p.c))
            self.transforms.forward(x[image: image + 1], v, first, count, tw,
                                    (p.pad[0], p.pad[2]))
            m = self.scratch("band_m", (ny * nx, count * tw, p.k))
            matmul(v, self.u, out=m)
            self.transforms.backward(m, y[image: image + 1], self.fused_bias, first, count,
                                     tw, activation)

    def _tiles(self, windows: np.ndarray, y: np.ndarray) -> None:
        """Convolve the input tiles ``windows`` (n, th, TW, C, ny, nx) into output rows ``y``."""
        p = self.problem
        (my, mx), (ny, nx) = self.tile, self.inner
        n, th, tw = windows.shape[:3]
        count, positions = n * th * tw, ny * nx
        with phase("copy"):
            d = self.scratch("d", (positions, count * p.c))
            np.copyto(d.reshape(ny, nx, n, th, tw, p.c), windows.transpose(4, 5, 0, 1, 2, 3))
        with phase("transform"):
            v = self.scratch("v", (positions, count, p.c))
            matmul(self.bt, d, out=v.reshape(positions, count * p.c))
        m = self.scratch("m", (positions, count * p.k))
        with phase("blas"):
            if self.transposed:   # (T, K, C) @ (T, C, tiles)
                matmul(self.u, v.transpose(0, 2, 1), out=m.reshape(positions, p.k, count))
            else:                 # (T, tiles, C) @ (T, C, K)
                matmul(v, self.u, out=m.reshape(positions, count, p.k))
        with phase("transform"):
            out = self.scratch("out", (my * mx, count * p.k))
            matmul(self.at, m, out=out)
        with phase("copy"):
            # one strided copy per position in the output tile, straight into y (plus bias)
            if self.transposed:
                out = out.reshape(my, mx, p.k, n, th, tw).transpose(0, 1, 3, 4, 5, 2)
            else:
                out = out.reshape(my, mx, n, th, tw, p.k)
            for a in range(min(my, y.shape[1])):
                for b in range(min(mx, p.out_w)):
                    dst = y[:, a::my, b::mx]
                    src = out[a, b, :, : dst.shape[1], : dst.shape[2]]
                    if self.bias is None:
                        np.copyto(dst, src)
                    else:
                        np.add(src, self.bias, out=dst)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Winograd:
    verdict = tile_verdict(p, params, "numpy")
    if not verdict.ok:
        raise UnsupportedError(verdict.reason, algorithm="winograd", backend="numpy")
    return Winograd(p, w_ohwi, bias, verdict.params["tile"])
