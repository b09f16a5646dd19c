"""The fallback chain: no OpenCL, a failed build, a method the device cannot run -> numpy,
with a FallbackWarning and ``.fallback`` saying why; never silently."""

from __future__ import annotations

import warnings

import pytest
from opencl_support import assert_matches_reference, data, opencl_runtime

from convsel import api as ops
from convsel.errors import FallbackWarning
from convsel.problem import ConvProblem
from convsel.verdict import failed

pytest.importorskip("pyopencl")

from convsel.backends import (
    IMPLEMENTATIONS,
    opencl,
)
from convsel.backends.opencl import direct

pytestmark = pytest.mark.opencl

P = ConvProblem(1, 6, 6, 4, 5, 3, 3, pad=1, activation="leaky_relu(0.1)")


def _prepare(algorithm: str = "direct", problem: ConvProblem = P):
    x, w, b = data(problem)
    with pytest.warns(FallbackWarning) as record:
        op = ops.prepare(problem, w, b, algorithm=algorithm, backend="opencl")
    assert op.backend == "numpy" and op.fallback
    assert str(record[0].message) == op.fallback
    assert_matches_reference(problem, x, w, b, op.run(x), algorithm)
    return op


def test_no_fft_on_opencl_falls_back_to_numpy():
    assert ("fft", "opencl") not in IMPLEMENTATIONS
    op = _prepare("fft")
    assert "no fft implementation" in op.fallback and op.algorithm == "fft"


def test_missing_opencl_falls_back(monkeypatch):
    monkeypatch.setattr(opencl, "available", lambda: failed("pyopencl cannot be imported: x"))
    op = _prepare()
    assert "pyopencl cannot be imported" in op.fallback


def test_build_failure_falls_back_with_the_log(monkeypatch):
    opencl_runtime()
    broken = "__kernel void direct_conv(__global float* x) { x[0] = not_declared; }"
    monkeypatch.setattr(direct.prog, "program_source", lambda name, preamble="": broken)
    op = _prepare()
    assert "failed to prepare direct" in op.fallback and "not_declared" in op.fallback


def test_buffer_beyond_the_device_falls_back(monkeypatch):
    rt = opencl_runtime()
    monkeypatch.setattr(rt, "max_alloc", 64)
    op = _prepare("im2col_gemm")
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in op.fallback


def test_opencl_runs_when_it_can():
    opencl_runtime()
    x, w, b = data(P)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        op = ops.prepare(P, w, b, algorithm="direct", backend="opencl")
    assert op.backend == "opencl" and op.fallback is None
    assert_matches_reference(P, x, w, b, op.run(x), "direct")
