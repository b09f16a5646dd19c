"""THE tolerance table of the correctness suite: one bound per (algorithm, dtype).

An output passes when ``max |y - ref| <= bound * max(Σ|x|·|w| + |bias|)``: the error is
measured against the float64 reference and scaled by the largest sum of absolute products
any output adds up, the quantity floating-point summation error is proportional to. The
bounds hold for every backend; they are never loosened to make a test pass.
"""

from __future__ import annotations

# float32 accumulation: ~1e-7 per rounding, a few hundred terms per output in the suite.
_F32_EXACT = 1e-5
# float16 output: the result itself is rounded to half (2**-11 relative).
_F16 = 1.5e-3

TOLERANCE: dict[tuple[str, str], float] = {
    ("direct", "F32"): _F32_EXACT,
    ("im2col_gemm", "F32"): _F32_EXACT,
    ("gemm_1x1", "F32"): _F32_EXACT,
    ("indirect_gemm", "F32"): _F32_EXACT,
    ("implicit_gemm", "F32"): _F32_EXACT,
    # FFT rounding grows with log(block size) and spreads across a block.
    ("fft", "F32"): 2e-5,
    # Winograd transforms amplify rounding; F(4x4, 5x5) and F(2x2, 7x7) (8-point axes) most,
    # ~10x the others (see tests/algorithms/test_winograd_transforms.py).
    ("winograd", "F32"): 1e-4,
    ("direct", "F16"): _F16,
    ("im2col_gemm", "F16"): _F16,
    ("gemm_1x1", "F16"): _F16,
    ("indirect_gemm", "F16"): _F16,
    ("implicit_gemm", "F16"): _F16,
    ("fft", "F16"): _F16,
    ("winograd", "F16"): 2e-3,
}


def tolerance(algorithm: str, dtype: str) -> float:
    return TOLERANCE[(algorithm, dtype)]
