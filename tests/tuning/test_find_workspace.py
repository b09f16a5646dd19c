"""The registry's pure workspace estimate equals what the prepared kernels report."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opencl_support import opencl_runtime

from convsel import algorithms, backends
from convsel.algorithms import fft as fft_home
from convsel.problem import ConvProblem
from convsel.rules import load_rules
from convsel.tuning.layers import load_layers

RULES = load_rules()


def _kernels(p: ConvProblem, backend: str, runtime=None, bias: bool = True):
    """(algorithm, resolved params, prepared kernel) for every variant ``backend`` runs."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32) if bias else None
    for alg in algorithms.ALGORITHMS:
        module = backends.implementation(alg, backend)
        if module is None or not algorithms.supports(alg, p, RULES).ok:
            continue
        for params in algorithms.variants(alg, p, RULES):
            params = {**params, **algorithms.supports(alg, p, RULES, params).params}
            if not module.supports(p, params, runtime).ok:
                continue
            yield alg, params, module.prepare(p, w, b, params, runtime)


def test_next_fast_len_is_scipys():
    import scipy.fft

    for n in range(1, 2000):
        assert fft_home.next_fast_len(n) == scipy.fft.next_fast_len(n, real=True)


def _narrow(p: ConvProblem, cap: int = 16) -> ConvProblem:
    """``p`` with at most ``cap`` channels (grouping kept), so that transforming full-size
    weights (FFT spectra of 512x512 filters) does not dominate the suite's time."""
    if p.c <= cap and p.k <= cap:
        return p
    if p.groups == 1:
        return p.replace(c=min(p.c, cap), k=min(p.k, cap))
    per_group_in, per_group_out = p.c // p.groups, p.k // p.groups
    groups = max(1, cap // max(per_group_in, per_group_out))
    return p.replace(c=groups * per_group_in, k=groups * per_group_out, groups=groups)


def _layer_problems() -> list[ConvProblem]:
    layers, _ = load_layers()
    seen: dict[str, ConvProblem] = {}
    for layer in layers:
        p = _narrow(layer.problem)
        seen.setdefault(str(p), p)
    return list(seen.values())


def test_estimate_equals_numpy_kernels_on_every_shipped_layer():
    """Every layer geometry of the shipped nets (full spatial size, channels capped),
    every algorithm and tile."""
    checked = 0
    for p in _layer_problems():
        for alg, params, kernel in _kernels(p, "numpy"):
            estimate = algorithms.workspace_bytes(alg, p, params, "numpy")
            assert estimate == kernel.workspace_bytes, (alg, params, str(p))
            assert algorithms.workspace_bytes(alg, p, params) >= kernel.workspace_bytes
            checked += 1
    assert checked > 200


@pytest.mark.parametrize("p", [
    ConvProblem(2, 300, 300, 64, 64, 3, 3, pad=1),              # im2col/winograd in bands
    ConvProblem(1, 540, 960, 16, 32, 9, 9, pad=4),              # 1080p-ish large kernel
    ConvProblem(1, 256, 256, 96, 96, 3, 3, pad=1, groups=96),   # depthwise, grouped im2col
    ConvProblem(2, 28, 28, 32, 64, 7, 7, pad=3, groups=32),     # a channel multiplier
    ConvProblem(1, 19, 23, 8, 24, 3, 3, stride=2, groups=8, dtype="F16"),
    ConvProblem(1, 64, 64, 32, 32, 3, 3, pad=(0, 2, 1, 0), dtype="F16"),
    ConvProblem(3, 33, 17, 8, 12, 1, 1, stride=2),
    ConvProblem(1, 40, 40, 8, 8, 5, 3, dilation=(2, 3), pad=(3, 2)),
])
def test_estimate_equals_numpy_kernels_on_large_and_odd_shapes(p):
    for alg, params, kernel in _kernels(p, "numpy"):
        assert algorithms.workspace_bytes(alg, p, params, "numpy") == kernel.workspace_bytes


@st.composite
def problems(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    dy, dx = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h = draw(st.integers(dy * (kh - 1) + 1, 24))
    w = draw(st.integers(dx * (kw - 1) + 1, 24))
    groups = draw(st.sampled_from([1, 2, 4]))
    c = groups * draw(st.integers(1, 6))
    k = groups * draw(st.integers(1, 6))
    pad = draw(st.integers(0, min(kh, kw) - 1)) if min(kh, kw) > 1 else 0
    return ConvProblem(draw(st.integers(1, 3)), h, w, c, k, kh, kw,
                       stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                       dilation=(dy, dx), pad=pad, groups=groups,
                       dtype=draw(st.sampled_from(["F32", "F16"])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_estimate_equals_numpy_kernels_on_random_shapes(p):
    for alg, params, kernel in _kernels(p, "numpy"):
        assert algorithms.workspace_bytes(alg, p, params, "numpy") == kernel.workspace_bytes
    # without a bias, im2col_gemm and gemm_1x1 need a column less: the estimate bounds it
    for alg, params, kernel in _kernels(p, "numpy", bias=False):
        assert algorithms.workspace_bytes(alg, p, params, "numpy") >= kernel.workspace_bytes


@pytest.mark.parametrize("p", [
    ConvProblem(2, 9, 9, 8, 12, 3, 3, pad=1),
    ConvProblem(1, 10, 7, 6, 4, 1, 1, stride=2),
    ConvProblem(1, 8, 8, 8, 8, 3, 3, pad=1, groups=8),
    ConvProblem(1, 9, 9, 4, 8, 5, 5, pad=2, dtype="F16"),
])
def test_estimate_bounds_opencl_kernels_and_is_exact_without_split_k(p):
    """OpenCL GEMMs may split their reduction on GPU devices (device-dependent): the estimate
    adds the most split-K can take; without it (CPU devices) it is the kernel's value."""
    import pyopencl as cl

    runtime = opencl_runtime()
    if p.dtype == "F16" and not runtime.fp16:
        pytest.skip("no fp16 on this OpenCL device")
    found = list(_kernels(p, "opencl", runtime))
    assert found
    on_gpu = bool(runtime.device.type & cl.device_type.GPU)
    for alg, params, kernel in found:
        estimate = algorithms.workspace_bytes(alg, p, params, "opencl")
        assert estimate >= kernel.workspace_bytes, (alg, params)
        assert algorithms.workspace_bytes(alg, p, params) >= kernel.workspace_bytes
        if not on_gpu:   # no split-K here: the rest of the estimate is exact
            headroom = algorithms.spec(alg).headroom_bytes(p, params, "opencl")
            assert estimate - headroom == kernel.workspace_bytes, (alg, params)


@pytest.mark.parametrize("p", [
    ConvProblem(2, 9, 9, 8, 12, 3, 3, pad=1),
    ConvProblem(1, 10, 7, 6, 4, 1, 1, stride=2),
    ConvProblem(1, 8, 8, 8, 8, 3, 3, pad=1, groups=8),
    ConvProblem(1, 9, 9, 4, 8, 5, 5, pad=2, dtype="F16"),
    ConvProblem(1, 56, 56, 64, 64, 1, 1),
])
def test_estimate_bounds_onednn_kernels_and_is_exact_but_for_the_scratchpad(p):
    """oneDNN's scratchpad depends on the machine (instruction set, threads): the estimate
    adds its bound, which the backend enforces; the rest (an F16 input's float32 copy) is
    exact."""
    ready = backends.available("onednn")
    if not ready.ok:
        pytest.skip(f"onednn backend unavailable: {ready.reason}")
    found = list(_kernels(p, "onednn"))
    assert [alg for alg, _, _ in found] == ["direct"]
    for alg, params, kernel in found:
        estimate = algorithms.workspace_bytes(alg, p, params, "onednn")
        headroom = algorithms.spec(alg).headroom_bytes(p, params, "onednn")
        assert kernel.scratch_bytes <= headroom
        assert estimate - headroom == kernel.workspace_bytes - kernel.scratch_bytes
        assert estimate >= kernel.workspace_bytes


def test_an_explicit_split_is_estimated_exactly():
    runtime = opencl_runtime()
    p = ConvProblem(1, 8, 8, 64, 16, 3, 3, pad=1)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    module = backends.implementation("implicit_gemm", "opencl")
    checked = 0
    for split in (1, 2, 4):
        params = {"tile": (32, 32, 8, 4, 4), "vec": 4, "split": split}
        params = {**params, **algorithms.supports("implicit_gemm", p, RULES, params).params}
        if not module.supports(p, params, runtime).ok:
            continue
        kernel = module.prepare(p, w, None, params, runtime)
        assert algorithms.workspace_bytes("implicit_gemm", p, params, "opencl") == \
            kernel.workspace_bytes
        checked += 1
    assert checked == 3


def test_an_entry_without_an_estimate_answers_none():
    import dataclasses

    spec = dataclasses.replace(algorithms.spec("direct"), workspace={})
    assert spec.workspace_bytes(ConvProblem(1, 8, 8, 4, 4, 3, 3), {}) is None
