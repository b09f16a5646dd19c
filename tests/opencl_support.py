"""Shared by the OpenCL tests: the device runtime (or a skip), seeded data, and the check
against the reference (tolerances from tests/tolerances.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import assert_within_tolerance

from convsel.problem import ConvProblem


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


def assert_matches_reference(p: ConvProblem, x, w, b, y, algorithm: str) -> None:
    """``y`` (NHWC) matches the float64 reference within ``algorithm``'s tolerance: the one
    table and error measure of tests/tolerances.py."""
    assert_within_tolerance(p, x, w, b, y, algorithm)
