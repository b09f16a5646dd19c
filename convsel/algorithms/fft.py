"""FFT convolution (numpy): overlap-save blocks of the input, a per-frequency complex GEMM
over channels, inverse FFT. No groups; strides by subsampling the unit-stride output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from ..verdict import Verdict, failed, passed
from .cost import Gemm, candidate_features
from .shared import F16_ROUNDED, ceil_div, piece_bytes, ungrouped
from .spec import AlgorithmSpec, backend_modules

MIN_FFT = 16   # numpy: smallest block side worth an FFT


def next_fast_len(target: int) -> int:
    """The smallest 5-smooth integer >= ``target`` (scipy.fft.next_fast_len(real=True))."""
    n = max(1, target)
    while True:
        m = n
        for f in (2, 3, 5):
            while m % f == 0:
                m //= f
        if m == 1:
            return n
        n += 1


def fft_block(out: int, extent: int) -> tuple[int, int]:
    """(FFT length, valid outputs per block) for one axis of ``out`` unit-stride outputs and
    a kernel ``extent`` wide."""
    size = next_fast_len(min(out + extent - 1, max(MIN_FFT, 2 * extent)))
    return size, size - extent + 1


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    ey, ex = p.kernel_extent
    full = ((p.out_h - 1) * p.stride[0] + 1, (p.out_w - 1) * p.stride[1] + 1)
    (fy, ty), (fx, tx) = fft_block(full[0], ey), fft_block(full[1], ex)
    by, bx = ceil_div(full[0], ty), ceil_div(full[1], tx)
    freqs = fy * (fx // 2 + 1)
    row_bytes = bx * (8 * freqs * (2 * p.c + 2 * p.k) + 4 * fy * fx * p.k * 2)
    padded_in = p.n * (by * ty + ey - 1) * (bx * tx + ex - 1) * p.c * 4
    return padded_in + piece_bytes(p.n, by, row_bytes)


def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """Spectral products plus the transforms, over the whole padded image; the spectra as
    scratch memory."""
    fh, fw = p.h + p.pad[0] + p.pad[1], p.w + p.pad[2] + p.pad[3]
    bins = fh * (fw // 2 + 1)
    ffts = 5.0 * fh * fw * math.log2(max(fh * fw, 2)) * (p.n * p.c + p.c * p.k + p.n * p.k)
    flops = 8.0 * bins * p.n * p.c * p.k + ffts
    scratch = float(bins * (p.n * p.c + p.c * p.k + p.n * p.k) * 8)
    # one (complex) product per frequency bin: batch x output channels, over channels
    gemm = Gemm(p.n, p.k, p.c, bins)
    return candidate_features(p, params, flops=flops, scratch_bytes=scratch, gemm=gemm)


def dominated(p: ConvProblem) -> Verdict:
    """FFT with a 1x1 kernel: its spectral products alone are C*K complex multiply-adds per
    frequency bin, with at least as many bins as output pixels, where GEMM does C*K real
    multiply-adds per output pixel; the transforms come on top."""
    if (p.kh, p.kw) == (1, 1):
        return failed("not timed: FFT of a 1x1 kernel does more arithmetic than the GEMM it "
                      "replaces (C*K complex products per frequency bin vs C*K real products "
                      "per output pixel), so it cannot win")
    return passed("not dominated")


SPEC = AlgorithmSpec(
    "fft", "FFT of input and filter, product in the frequency domain",
    cpu_method="FFT", gpu_method="FFT",
    supports=ungrouped("fft", "FFT of input and filter; strides by subsampling"),
    backends=backend_modules("fft", "numpy"),
    timing_rank=4, colour="tab:purple",
    # FFT rounding grows with log(block size) and spreads across a block.
    tolerance={"F32": 2e-5, "F16": F16_ROUNDED},
    workspace={"numpy": numpy_workspace},
    features=features, dominated=dominated)
