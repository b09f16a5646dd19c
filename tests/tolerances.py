"""THE tolerance of every numeric test, per (algorithm, dtype), read from each algorithm's
home (``convsel.algorithms.<name>``, ``AlgorithmSpec.tolerance``), the one place it is
stated, and THE error measure it bounds.

An output passes when ``max |y - ref| <= bound * max(Σ|x|·|w| + |bias|)``: the error is
measured against the float64 reference and scaled by the largest sum of absolute products
any output adds up, the quantity floating-point summation error is proportional to. The
bounds hold for every backend; they are never loosened to make a test pass.
"""

from __future__ import annotations

import numpy as np

from convsel import algorithms
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference


def tolerance(algorithm: str, dtype: str) -> float:
    bounds = algorithms.spec(algorithm).tolerance
    if dtype not in bounds:
        raise KeyError(f"{algorithm}'s home states no tolerance for {dtype}; it has "
                       f"{', '.join(bounds)}")
    return bounds[dtype]


def error_scale(p: ConvProblem, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> float:
    """The largest Σ|x|·|w| + |bias| over outputs: what float summation error scales with."""
    plain = p.replace(activation=None)
    total = conv2d_reference(plain, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             None if bias is None else np.abs(bias.astype(np.float64)))
    return float(total.max()) or 1.0


def relative_error(p: ConvProblem, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                   y: np.ndarray) -> float:
    """``max |y - ref|`` over :func:`error_scale` (x, w, y NHWC/OHWI as the kernels take)."""
    ref = conv2d_reference(p, x, w, bias)
    return float(np.abs(y.astype(np.float64) - ref).max()) / error_scale(p, x, w, bias)


def assert_within_tolerance(p: ConvProblem, x: np.ndarray, w: np.ndarray,
                            bias: np.ndarray | None, y: np.ndarray, algorithm: str) -> None:
    """``y`` (NHWC) has the reference's shape and dtype, is finite, and is within
    ``algorithm``'s tolerance for ``p.dtype``."""
    assert y.shape == (p.n, p.out_h, p.out_w, p.k), (str(p), y.shape)
    assert y.dtype == (np.float16 if p.dtype == "F16" else np.float32), (str(p), y.dtype)
    assert np.isfinite(y).all(), f"{p}: {int((~np.isfinite(y)).sum())} non-finite outputs"
    err, bound = relative_error(p, x, w, bias, y), tolerance(algorithm, p.dtype)
    assert err <= bound, f"{algorithm} {p}: relative error {err:.2e} > {bound:.0e}"
