"""Shared by the OpenCL tests: the device runtime (or a skip), seeded data and tolerances."""

from __future__ import annotations

import numpy as np
import pytest

from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference


def opencl_runtime():
    """The default OpenCL runtime, or skip the test where this machine has no device."""
    from convsel.backends import opencl

    verdict = opencl.available()
    if not verdict.ok:
        pytest.skip(f"no OpenCL here: {verdict.reason}")
    return opencl.get_runtime()


def data(p: ConvProblem, seed: int = 0, bias: bool = True):
    """x (NHWC), w (OHWI) and bias in the problem's dtype, standard normal."""
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal(p.input_shape).astype(dtype)
    w = rng.standard_normal(p.weights_shape).astype(dtype)
    b = rng.standard_normal(p.k).astype(dtype) if bias else None
    return x, w, b


# Relative to max(1, max |reference|). F16 rounds the output to 11 bits (2^-11 = 4.9e-4);
# Winograd's transforms cost some float32 digits on the larger tiles.
TOLERANCE = {("F32", False): 2e-5, ("F32", True): 2e-4, ("F16", False): 2e-3,
             ("F16", True): 3e-3}


def assert_matches_reference(p: ConvProblem, x, w, b, y, winograd: bool = False) -> None:
    ref = conv2d_reference(p, x, w, b)
    assert y.shape == ref.shape
    assert y.dtype == (np.float16 if p.dtype == "F16" else np.float32)
    assert np.isfinite(y).all()
    err = float(np.max(np.abs(y.astype(np.float64) - ref))) / max(1.0, float(np.abs(ref).max()))
    assert err <= TOLERANCE[(p.dtype, winograd)], f"{p}: relative error {err:.2e}"
