"""OpenCL kernels against the float64 reference: every activation through -D, every
Winograd (tile, kernel) pair, groups, F16's two paths, the prepared (ops) form."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from algorithm_cases import PLAIN, accepts, first_supported, implemented_on, resolved
from opencl_support import assert_matches_reference, data, opencl_runtime

from convsel import api as ops
from convsel import backends
from convsel.activation import KINDS, parse_activation
from convsel.algorithms import winograd_tiles
from convsel.errors import KernelBuildError
from convsel.problem import ConvProblem
from convsel.rules import load_rules

pytest.importorskip("pyopencl")

from convsel.backends.opencl import direct, gemm_1x1, im2col_gemm, indirect_gemm, program, winograd

OPENCL = implemented_on("opencl")

pytestmark = pytest.mark.opencl


@pytest.fixture(scope="module")
def rt():
    return opencl_runtime()


def test_every_activation_kind_has_a_kernel_id():
    assert set(program.ACTIVATION_IDS) == set(KINDS)
    assert len(set(program.ACTIVATION_IDS.values())) == len(KINDS)
    assert 0 not in program.ACTIVATION_IDS.values()          # 0 is the identity


@pytest.mark.parametrize("value,text", [(6.0, "6.000000000e+00f"), (-0.5, "-5.000000000e-01f"),
                                        (0.1, "1.000000015e-01f")])
def test_float_literal(value, text):
    assert program.float_literal(value) == text


ACTIVATIONS = ["relu", "bounded_relu(0.75)", "lu_bounded_relu(1.5, -0.5)", "leaky_relu(0.2)",
               "linear(0.5, -1)", "logistic", "tanh(1.5, 0.5)", "elu(0.7)", "swish(1.3)",
               "hard_swish", "abs"]


def test_activation_list_covers_every_kind():
    assert {parse_activation(a).kind for a in ACTIVATIONS} == set(KINDS)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_fused_activation(rt, activation):
    # A 1x1 GEMM keeps pre-activation values in about [-6, 6]: every branch is exercised.
    p = ConvProblem(1, 4, 5, 6, 8, 1, 1, activation=activation)
    x, w, b = data(p, seed=3)
    kernel = gemm_1x1.prepare(p, w, b, {}, rt)
    assert_matches_reference(p, x, w, b, kernel.run(x), "gemm_1x1")


def _pairs():
    rules = load_rules()
    kernels = [(3, 3), (1, 3), (3, 1), (5, 5), (1, 5), (5, 1), (7, 7), (1, 7), (7, 1)]
    return [(k, t) for k in kernels
            for t in winograd_tiles(ConvProblem(1, 9, 9, 1, 1, *k), rules)]


def test_pairs_include_every_gpu_nhwc_pair():
    gpu = {(e.kernel, e.tile) for e in load_rules().gpu.winograd.pairs["NHWC"]}
    assert gpu <= set(_pairs())


@pytest.mark.parametrize("kernel,tile", _pairs(), ids=lambda v: "x".join(map(str, v)))
def test_winograd_pair(rt, kernel, tile):
    kh, kw = kernel
    pad = (kh // 2, kh - 1 - kh // 2, kw // 2, (kw - 1) // 2 + (kw > 1))   # asymmetric
    pad = tuple(min(v, e - 1) for v, e in zip(pad, (kh, kh, kw, kw)))
    p = ConvProblem(2, 11, 10, 5, 6, kh, kw, pad=pad, activation="relu")
    x, w, b = data(p, seed=1)
    kernel_ = winograd.prepare(p, w, b, {"tile": tile}, rt)
    assert_matches_reference(p, x, w, b, kernel_.run(x), "winograd")


GROUPED = [ConvProblem(2, 7, 6, 6, 9, 3, 3, pad=(1, 0, 1, 1), groups=3, stride=(2, 1)),
           ConvProblem(1, 8, 7, 8, 8, 3, 3, pad=1, groups=8, dilation=2, activation="relu"),
           ConvProblem(1, 6, 6, 8, 16, 3, 3, pad=1, groups=2)]


GROUPED_CASES = [(a, p) for a in OPENCL for p in GROUPED if accepts(a, p)]


def test_every_grouped_problem_is_run_by_some_algorithm():
    assert {str(p) for _, p in GROUPED_CASES} == {str(p) for p in GROUPED}


@pytest.mark.parametrize("algorithm,p", GROUPED_CASES, ids=str)
def test_grouped(rt, algorithm, p):
    x, w, b = data(p, seed=2)
    kernel = module(algorithm).prepare(p, w, b, resolved(algorithm, p), rt)
    assert_matches_reference(p, x, w, b, kernel.run(x), algorithm)


def module(algorithm: str):
    return backends.implementation(algorithm, "opencl")


def _f16_cases():
    """Every OpenCL algorithm on the first of these its constraint accepts."""
    conv = ConvProblem(2, 7, 9, 6, 10, 3, 3, pad=(1, 1, 0, 2), dtype="F16",
                       activation="bounded_relu(4)")
    one = ConvProblem(2, 5, 6, 12, 7, 1, 1, stride=2, dtype="F16")
    return [(a, first_supported(a, (conv, one))) for a in OPENCL]


@pytest.mark.parametrize("algorithm,p", _f16_cases(), ids=lambda v: str(v)[:12])
def test_f16_storage_path(rt, algorithm, p, monkeypatch):
    """F16 as half storage with float arithmetic: runs on every device (no extension)."""
    monkeypatch.setenv(program.HALF_ENV, "storage")
    assert program.dtype_options(p, rt) == ["-DDATA_F16"]
    x, w, b = data(p, seed=4)
    y = module(algorithm).prepare(p, w, b, resolved(algorithm, p), rt).run(x)
    assert_matches_reference(p, x, w, b, y, algorithm)


@pytest.mark.parametrize("algorithm,p", _f16_cases(), ids=lambda v: str(v)[:12])
def test_f16_native_path(rt, algorithm, p):
    if not rt.fp16:
        pytest.skip("no cl_khr_fp16 on this device: native half cannot run here")
    assert "-DHALF_NATIVE" in program.dtype_options(p, rt)
    x, w, b = data(p, seed=4)
    y = module(algorithm).prepare(p, w, b, resolved(algorithm, p), rt).run(x)
    assert_matches_reference(p, x, w, b, y, algorithm)


def test_forced_native_half_without_the_extension_fails_to_build(rt, monkeypatch):
    """Why native half is never chosen without cl_khr_fp16: the device cannot build (or
    create) such kernels, and the KernelBuildError says so with the options it was given."""
    if rt.fp16:
        pytest.skip("this device has cl_khr_fp16: test_f16_native_path runs the native path")
    monkeypatch.setattr(program, "half_mode", lambda p, runtime: "native")
    algorithm, p = _f16_cases()[0]
    _, w, b = data(p, seed=4)
    with pytest.raises(KernelBuildError) as info:
        module(algorithm).prepare(p, w, b, resolved(algorithm, p), rt)
    assert info.value.log
    assert "-DHALF_NATIVE" in info.value.options or "cannot be created" in str(info.value)


def test_native_half_is_chosen_only_with_the_extension(monkeypatch):
    monkeypatch.delenv(program.HALF_ENV, raising=False)
    f16, f32 = ConvProblem(1, 4, 4, 2, 2, 3, 3, dtype="F16"), ConvProblem(1, 4, 4, 2, 2, 3, 3)
    with_ext, without = SimpleNamespace(fp16=True), SimpleNamespace(fp16=False)
    assert program.half_mode(f16, without) == "storage"
    assert program.dtype_options(f16, without) == ["-DDATA_F16"]
    assert program.half_mode(f16, with_ext) == "native"
    assert program.dtype_options(f16, with_ext) == ["-DDATA_F16", "-DHALF_NATIVE"]
    assert program.half_mode(f32, with_ext) is None
    assert program.dtype_options(f32, with_ext) == ["-DDATA_F32"]
    monkeypatch.setenv(program.HALF_ENV, "storage")
    assert program.half_mode(f16, with_ext) == "storage"


def test_this_device_uses_the_path_its_extensions_allow(rt):
    p = ConvProblem(1, 4, 4, 2, 2, 3, 3, dtype="F16")
    assert ("-DHALF_NATIVE" in program.dtype_options(p, rt)) == rt.fp16


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("weights_layout", ["OIHW", "HWIO", "OHWI"])
def test_prepared_form_through_ops(rt, layout, weights_layout):
    p = ConvProblem(2, 6, 5, 4, 6, 3, 3, pad=(0, 1, 1, 0), layout=layout, activation="relu")
    x, w, b = data(p.replace(layout="NHWC"), seed=5)
    w_in = {"OHWI": w, "OIHW": w.transpose(0, 3, 1, 2), "HWIO": w.transpose(1, 2, 3, 0)}
    x_in = x.transpose(0, 3, 1, 2) if layout == "NCHW" else x
    op = ops.prepare(p, w_in[weights_layout], b, weights_layout=weights_layout,
                     algorithm="indirect_gemm", backend="opencl")
    assert op.backend == "opencl" and op.fallback is None
    y = op.run(np.ascontiguousarray(x_in))
    y = y.transpose(0, 2, 3, 1) if layout == "NCHW" else y
    assert_matches_reference(p.replace(layout="NHWC"), x, w, b, np.ascontiguousarray(y),
                             "indirect_gemm")


@pytest.mark.parametrize("algorithm", OPENCL)
def test_without_bias(rt, algorithm):
    p = first_supported(algorithm, PLAIN)
    x, w, _ = data(p, seed=6)
    kernel = module(algorithm).prepare(p, w, None, resolved(algorithm, p), rt)
    assert_matches_reference(p, x, w, None, kernel.run(x), algorithm)


def test_workspace_bytes(rt):
    p = ConvProblem(2, 6, 6, 3, 4, 3, 3, pad=1)
    _, w, b = data(p)
    m, kd = 2 * 6 * 6, 9 * 3
    assert direct.prepare(p, w, b, {}, rt).workspace_bytes == 0
    assert im2col_gemm.prepare(p, w, b, {}, rt).workspace_bytes == m * kd * 4
    assert indirect_gemm.prepare(p, w, b, {}, rt).workspace_bytes == m * 9 * 4
    tiles = 2 * 2 * 2                                      # F(4x4, 3x3): 6x6 in 2x2 tiles
    assert winograd.prepare(p, w, b, {"tile": (4, 4)}, rt).workspace_bytes == (
        36 * tiles * (3 + 4) * 4 + 36 * 3 * 4 * 4)


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_output_poison_reaches_unwritten_elements(rt, dtype, monkeypatch):
    """The correctness suite's NaN poison works: with no kernel launched, every output
    element is the poison, not a stale value from the previous run."""
    from convsel.backends.opencl import prepared

    p = ConvProblem(1, 6, 6, 4, 8, 3, 3, pad=1, dtype=dtype)
    x, w, b = data(p)
    kernel = direct.prepare(p, w, b, {}, rt)
    assert np.isfinite(kernel.run(x).astype(np.float32)).all()
    monkeypatch.setattr(prepared, "OUTPUT_FILL", np.nan)
    kernel.steps = []
    assert np.isnan(kernel.run(x).astype(np.float32)).all()
