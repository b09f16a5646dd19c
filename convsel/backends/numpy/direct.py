"""Direct convolution: accumulate tap by tap into the output, with no im2col buffer.

For each kernel tap (i, j), the input pixels it reads form a strided view of the unpadded
input; the outputs whose tap falls inside the image get ``view @ w[i, j]`` added. Padding is
not materialised (each tap skips the output rows and columns that would read it), except for
depthwise problems, where a padded copy makes every tap one pass over whole rows. The
output is processed in bands of rows so the one scratch buffer (a band's product) stays
small and in cache; that buffer is the whole workspace.

Depthwise convolution (one input channel per group) is an elementwise multiply-add per tap,
which is what MobileNet's layers need: the tap's weights are pre-tiled along a whole output
row so that, at unit stride, each multiply runs over long contiguous rows instead of
broadcasting C values. A channel multiplier (K/C outputs per input channel) runs as the
depthwise convolution of the input with each channel repeated K/C times: one copy of the
input buys the depthwise kernels (the fused one with the cpu extra); multiplying each tap's
window by a (C, K/C) block instead was 3.2x slower than the fastest other algorithm (the
quiet host's training timings: 13 of 13 such shapes), where depthwise proper wins every
shape (49 of 49). Other grouped problems contract each group's channels with einsum.
The bias is added per band while it is in cache, and a tap that covers the whole band
initialises it. (Spreading bands over a thread pool was tried again, with BLAS switched to
one thread meanwhile, and was 1.4-1.5x slower, on the development machine and on the quiet
two-core host alike: the per-tap numpy operations are short, and the threads queue for the
GIL between them.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...algorithms.direct import BAND_ELEMENTS, as_depthwise, has_channel_multiplier
from ...problem import ConvProblem
from ...verdict import Verdict
from .common import ITEM, Prepared, as_f32, check_x, float_only, new_output, padded_bytes
from .epilogue import cast, finish
from .gemm import matmul
from .profile import phase


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    return float_only(p, "direct")


def _valid(out: int, stride: int, before: int, offset: int, size: int) -> tuple[int, int]:
    """Output indices [lo, hi) whose input index ``o*stride - before + offset`` is inside
    [0, size): the outputs this tap touches without reading padding."""
    lo = max(0, -(-(before - offset) // stride))
    hi = min(out, (size - 1 + before - offset) // stride + 1)
    return lo, max(lo, hi)


class Direct(Prepared):
    """Tap-by-tap accumulation; ``workspace_bytes`` is one band's product buffer."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        g, cg, kg = p.groups, p.c // p.groups, p.k // p.groups
        w = as_f32(w_ohwi)                                      # K, KH, KW, Cg
        if g == 1:
            self.taps = as_f32(w.transpose(1, 2, 3, 0))         # KH, KW, C, K
        elif cg == 1 and kg == 1:   # depthwise: KH, KW, OW·C (each tap tiled along a row)
            self.taps = as_f32(np.tile(w[..., 0].transpose(1, 2, 0)[:, :, None], (1, 1, p.out_w, 1)
                                       ).reshape(p.kh, p.kw, p.out_w * g))
        else:
            self.taps = as_f32(w.reshape(g, kg, p.kh, p.kw, cg).transpose(2, 3, 0, 4, 1))
        self.band = max(1, BAND_ELEMENTS // (p.out_w * p.k))   # output rows per band
        band_elements = min(self.band, p.out_h) * p.out_w * p.k
        # Depthwise taps are two memory-bound passes each, and a tap clipped by padding
        # runs over a ragged sub-block: a padded copy of the input (one pass) makes every
        # tap a full-band, contiguous-row pass. Dense direct keeps its tiny workspace.
        self.pad_input = cg == 1 and kg == 1 and g > 1 and any(p.pad)
        top, bottom, left, right = p.pad if self.pad_input else (0, 0, 0, 0)
        padded = padded_bytes(p) if self.pad_input else 0
        f16_copy = p.n * p.h * p.w * p.c * ITEM if p.dtype == "F16" and not padded else 0
        super().__init__(p, bias, band_elements * ITEM + f16_copy + padded)
        sy, sx = p.stride
        dy, dx = p.dilation
        self.before = (p.pad[0] - top, p.pad[2] - left)   # padding the taps still skip
        hp, wp = p.h + top + bottom, p.w + left + right
        self.rows = [_valid(p.out_h, sy, self.before[0], i * dy, hp) for i in range(p.kh)]
        self.cols = [_valid(p.out_w, sx, self.before[1], j * dx, wp) for j in range(p.kw)]
        # The fused kernel (the cpu extra) reads the unpadded input and writes each output
        # once; it needs less memory than the workspace claimed above, which stays the
        # same either way so that the pure estimate (convsel.algorithms) holds for both.
        self.fused = None
        if cg == 1 and kg == 1 and g > 1 and self.accelerated:
            from .fused.activation import code_of
            from .fused.depthwise import Depthwise

            self.fused = Depthwise(w[..., 0].transpose(1, 2, 0), self.bias, p.out_w, p.stride,
                                   p.dilation, (p.pad[0], p.pad[2]), code_of(p.activation))

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        if self.fused is not None:
            with phase("pad"):
                x = self.float32(check_x(p, x))
            y = new_output((p.n, p.out_h, p.out_w, p.k))
            with phase("fused"):
                self.fused(x, y)
            return cast(p, y)
        with phase("pad"):
            x = check_x(p, x)
            x = self.padded(x, *p.pad) if self.pad_input else self.float32(x)
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        for n in range(p.n):
            for top in range(0, p.out_h, self.band):
                self._band(x, y, n, top)
        return finish(p, y, None, self.accelerated)

    def _band(self, x: np.ndarray, y: np.ndarray, n: int, top: int) -> None:
        """Write output rows [top, top + band) of image n: the sum of every tap, plus bias.

        A tap that reaches every output of the band (one that reads no padding there)
        writes the band directly, so no pass is spent clearing it; the bias is added while
        the band is still in cache."""
        p = self.problem
        bottom = min(p.out_h, top + self.band)
        acc = y[n, top:bottom]
        x = x[n]
        scratch = self.scratch("band", (min(self.band, p.out_h) * p.out_w * p.k,))
        sy, sx = p.stride
        dy, dx = p.dilation
        taps = []
        for i, (lo, hi) in enumerate(self.rows):
            r0, r1 = max(lo, top), min(hi, bottom)
            for j, (c0, c1) in enumerate(self.cols):
                if r0 < r1 and c0 < c1:
                    full = (r0, r1, c0, c1) == (top, bottom, 0, p.out_w)
                    taps.append((not full, i, j, r0, r1, c0, c1))
        taps.sort()   # a tap covering the whole band (if any) first
        first = bool(taps) and not taps[0][0]
        with phase("elementwise"):
            if not first:
                acc[...] = 0.0 if self.bias is None else self.bias
            for k, (_, i, j, r0, r1, c0, c1) in enumerate(taps):
                iy = r0 * sy - self.before[0] + i * dy
                ix = c0 * sx - self.before[1] + j * dx
                window = x[iy: iy + (r1 - r0 - 1) * sy + 1: sy,
                           ix: ix + (c1 - c0 - 1) * sx + 1: sx]
                if k == 0 and first:
                    self._tap(window, self.taps[i, j], acc)
                    continue
                product = scratch[: (r1 - r0) * (c1 - c0) * p.k].reshape(r1 - r0, c1 - c0, p.k)
                self._tap(window, self.taps[i, j], product)
                part = acc[r0 - top: r1 - top, c0:c1]
                np.add(part, product, out=part)
            if first and self.bias is not None:
                np.add(acc, self.bias, out=acc)

    def _tap(self, window: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        """``out = window ⋆ w`` for one tap: a GEMM, a depthwise scale, or grouped einsum."""
        p = self.problem
        if p.groups == 1:
            matmul(window, w, out=out)
            return
        rows, cols = window.shape[:2]
        g = p.groups
        if w.ndim == 1:   # depthwise: the tap's weights tiled along a row
            flat = cols * g
            if window.strides[1] == g * window.itemsize:   # unit stride: rows contiguous
                np.multiply(window.reshape(rows, flat), w[:flat], out=out.reshape(rows, flat))
            else:
                np.multiply(window, w[:g], out=out)
        else:
            np.einsum("rcgi,gik->rcgk", window.reshape(rows, cols, g, -1), w,
                      out=out.reshape(rows, cols, g, -1))


class ChannelMultiplier(Prepared):
    """A channel multiplier as a depthwise convolution of the repeated input; the workspace
    is the repeated input and the depthwise kernel's own."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.depthwise = Direct(as_depthwise(p), w_ohwi, bias)
        repeated = p.n * p.h * p.w * p.k * p.element_size
        super().__init__(p, bias, repeated + self.depthwise.workspace_bytes)

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        x = check_x(p, x)
        with phase("copy"):
            dtype = np.float16 if p.dtype == "F16" else np.float32
            repeated = self.scratch("repeated", (p.n, p.h, p.w, p.k), dtype=dtype)
            np.copyto(repeated.reshape(p.n, p.h, p.w, p.c, -1), x[..., None])
        return self.depthwise.run(repeated)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Direct | ChannelMultiplier:
    if has_channel_multiplier(p):
        return ChannelMultiplier(p, w_ohwi, bias)
    return Direct(p, w_ohwi, bias)
