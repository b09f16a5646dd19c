"""Every registered (algorithm, backend) pair against the float64 reference.

One table drives it: ``convsel.backends.IMPLEMENTATIONS``. A pair whose backend is not
available, or whose module does not import yet, is skipped with the reason; a problem the
backend cannot run is skipped only through that module's own ``supports()``. Problems come
from the packaged layers.json (scaled down, tests/layer_cases.py) and from hypothesis.
Outputs start as NaN on every backend (numpy's fresh arrays, OpenCL's device output buffer
before each run) so an element an algorithm never writes fails, and finite inputs must give
finite outputs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layer_cases import layer_cases
from problem_sizes import sizes
from tolerances import tolerance

from convsel import algorithms, backends
from convsel.activation import KINDS
from convsel.api import prepare
from convsel.backends.numpy import common as numpy_common
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference
from convsel.rules import default_rules

PAIRS = sorted(backends.IMPLEMENTATIONS)
PAIR_IDS = [f"{a}-{b}" for a, b in PAIRS]
RULES = default_rules()
WINOGRAD_KERNELS = sorted({tuple(e.kernel) for rows in RULES.cpu.winograd.values()
                           for e in rows} | {tuple(e.kernel) for rows in
                                             RULES.gpu.winograd.pairs.values() for e in rows})


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)
    try:
        from convsel.backends.opencl import prepared as opencl_prepared
    except ImportError:      # no pyopencl: the OpenCL pairs are skipped anyway
        return
    monkeypatch.setattr(opencl_prepared, "OUTPUT_FILL", np.nan)


@dataclass
class Impl:
    algorithm: str
    backend: str
    module: ModuleType
    runtime: Any


@cache
def _runtime(backend: str) -> Any:
    return backends.backend_module(backend).get_runtime(None)


def implementation(algorithm: str, backend: str) -> Impl:
    """The pair's module and runtime, or a pytest skip saying why it cannot run here."""
    ready = backends.available(backend)
    if not ready.ok:
        pytest.skip(f"{backend} backend unavailable: {ready.reason}")
    path = backends.IMPLEMENTATIONS[(algorithm, backend)]
    try:
        module = importlib.import_module(path)
    except ImportError as exc:
        pytest.skip(f"{path} does not import yet: {exc}")
    return Impl(algorithm, backend, module, _runtime(backend))


def variants(algorithm: str, p: ConvProblem) -> list[dict[str, Any]]:
    """The params to try: each Winograd tile paired with the kernel, else none."""
    if algorithm == "winograd":
        return [{"tile": t} for t in algorithms.winograd_tiles(p, RULES)]
    return [{}]


def random_data(p: ConvProblem, seed: int, with_bias: bool = True,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = rng.standard_normal(p.weights_shape).astype(dtype)
    bias = rng.standard_normal(p.k).astype(dtype) if with_bias else None
    return x, w, bias


def error_scale(p: ConvProblem, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> float:
    """The largest Σ|x|·|w| + |bias| over outputs: what float summation error scales with."""
    plain = p.replace(activation=None)
    total = conv2d_reference(plain, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             None if bias is None else np.abs(bias.astype(np.float64)))
    return float(total.max()) or 1.0


def check(impl: Impl, p: ConvProblem, params: dict[str, Any], seed: int,
          with_bias: bool = True) -> str | None:
    """Run one problem; the failure description, or None when it passes or is unsupported."""
    verdict = algorithms.supports(impl.algorithm, p, RULES, params)
    if not verdict.ok:
        return None
    params = {**params, **verdict.params}   # resolved, as convsel.execute hands them down
    if not impl.module.supports(p, params, impl.runtime).ok:
        return None
    x, w, bias = random_data(p, seed, with_bias)
    kernel = impl.module.prepare(p, w, bias, params, impl.runtime)
    y = kernel.run(x)
    if y.shape != (p.n, p.out_h, p.out_w, p.k):
        return f"{p} {params}: shape {y.shape}"
    want = np.float16 if p.dtype == "F16" else np.float32
    if y.dtype != want:
        return f"{p} {params}: dtype {y.dtype}, expected {np.dtype(want)}"
    if not np.isfinite(y).all():
        return f"{p} {params}: {int((~np.isfinite(y)).sum())} non-finite outputs"
    ref = conv2d_reference(p, x, w, bias)
    err = float(np.abs(y.astype(np.float64) - ref).max()) / error_scale(p, x, w, bias)
    bound = tolerance(impl.algorithm, p.dtype)
    if err > bound:
        return f"{p} {params}: relative error {err:.2e} > {bound:.0e}"
    if int(kernel.workspace_bytes) < 0:
        return f"{p} {params}: negative workspace {kernel.workspace_bytes}"
    return None


def run_cases(impl: Impl, cases: list[tuple[str, ConvProblem]]) -> None:
    failures, ran = [], 0
    for seed, (name, p) in enumerate(cases):
        for params in variants(impl.algorithm, p):
            failure = check(impl, p, params, seed)
            ran += failure is None
            if failure:
                failures.append(f"{name}: {failure}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures)


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_network_layers_f32(algorithm: str, backend: str) -> None:
    impl = implementation(algorithm, backend)
    s = sizes(backend)
    run_cases(impl, layer_cases(s.max_hw, s.max_channels, s.batch, s.layer_stride))


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_network_layers_f16(algorithm: str, backend: str) -> None:
    impl = implementation(algorithm, backend)
    s = sizes(backend)
    cases = layer_cases(s.max_hw, s.max_channels, s.batch, s.f16_layer_stride)
    run_cases(impl, [(name, p.replace(dtype="F16")) for name, p in cases])


@st.composite
def problems(draw: st.DrawFn, algorithm: str, max_hw: int, max_channels: int) -> ConvProblem:
    """A random valid problem shaped for ``algorithm``'s hard constraints."""
    if algorithm == "winograd":
        kh, kw = draw(st.sampled_from(WINOGRAD_KERNELS))
        stride, dilation, groups_allowed = (1, 1), (1, 1), False
    elif algorithm == "gemm_1x1":
        kh = kw = 1
        stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        dilation, groups_allowed = (1, 1), False
    else:
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        groups_allowed = algorithm in ("direct", "im2col_gemm")
    ext = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    pads = (0, 0, 0, 0) if algorithm == "gemm_1x1" else tuple(
        draw(st.integers(0, ext[i // 2] - 1)) for i in range(4))
    groups = draw(st.sampled_from([1, 2, 3])) if groups_allowed else 1
    cg = draw(st.integers(1, max(1, max_channels // groups)))
    kg = draw(st.integers(1, max(1, max_channels // groups)))
    h = draw(st.integers(max(1, ext[0] - pads[0] - pads[1]), max_hw))
    w = draw(st.integers(max(1, ext[1] - pads[2] - pads[3]), max_hw))
    kind = draw(st.sampled_from([None, *sorted(KINDS)]))
    return ConvProblem(draw(st.integers(1, 3)), h, w, cg * groups, kg * groups, kh, kw,
                       stride=stride, pad=pads, dilation=dilation, groups=groups,
                       dtype=draw(st.sampled_from(["F32", "F32", "F16"])), activation=kind)


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_random_problems(algorithm: str, backend: str) -> None:
    impl = implementation(algorithm, backend)
    s = sizes(backend)

    @settings(max_examples=s.max_examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(p=problems(algorithm, s.max_random_hw, s.max_random_channels),
           seed=st.integers(0, 2**16), with_bias=st.booleans())
    def one(p: ConvProblem, seed: int, with_bias: bool) -> None:
        for params in variants(algorithm, p):
            failure = check(impl, p, params, seed, with_bias)
            assert failure is None, failure

    one()


_LAYOUT_AXES = {"OHWI": (0, 1, 2, 3), "HWIO": (1, 2, 3, 0), "OIHW": (0, 3, 1, 2)}


@pytest.mark.filterwarnings("error::convsel.errors.FallbackWarning")
@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_public_path_layouts_bias_and_activations(algorithm: str, backend: str) -> None:
    """Through convsel.prepare: every weights layout, NHWC and NCHW, each activation kind
    in turn; a fallback to another backend is an error here."""
    impl = implementation(algorithm, backend)
    kernel = (1, 1) if algorithm == "gemm_1x1" else (3, 3)
    kinds = sorted(KINDS)
    cases = [(wl, layout) for wl in _LAYOUT_AXES for layout in ("NHWC", "NCHW")]
    for i, (weights_layout, layout) in enumerate(cases):
        p = ConvProblem(2, 7, 9, 5, 6, *kernel, pad=(1, 0, 1, 1) if kernel == (3, 3) else 0,
                        layout=layout, activation=kinds[(i * 5 + len(algorithm)) % len(kinds)])
        params = algorithms.supports(algorithm, p, RULES).params
        if not impl.module.supports(p, params, impl.runtime).ok:
            continue
        x, w, bias = random_data(p, i)
        op = prepare(p, np.transpose(w, _LAYOUT_AXES[weights_layout]), bias,
                     weights_layout=weights_layout, algorithm=algorithm, backend=backend)
        x_in = x if layout == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        y = op.run(x_in)
        if layout == "NCHW":
            y = y.transpose(0, 2, 3, 1)
        err = np.abs(y - conv2d_reference(p, x, w, bias)).max() / error_scale(p, x, w, bias)
        assert err <= tolerance(algorithm, "F32"), (weights_layout, layout, str(p), err)


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_propagates(algorithm: str, backend: str, bad: float) -> None:
    """NaN/Inf in the data is no error: every output the reference makes non-finite is."""
    impl = implementation(algorithm, backend)
    kernel = (3, 3) if algorithm != "gemm_1x1" else (1, 1)
    p = ConvProblem(2, 8, 9, 4, 5, *kernel, pad=(1, 0, 1, 1) if kernel == (3, 3) else 0)
    params = variants(algorithm, p)[0]
    if not impl.module.supports(p, params, impl.runtime).ok:
        pytest.skip(f"{backend} {algorithm} does not run {p}")
    x, w, bias = random_data(p, 7)
    x[1, 4, 5, 2] = bad
    with np.errstate(invalid="ignore"):
        y = impl.module.prepare(p, w, bias, params, impl.runtime).run(x)
        ref = conv2d_reference(p, x, w, bias)
    assert (~np.isfinite(y))[~np.isfinite(ref)].all()
    assert np.isfinite(y[0]).all(), "a non-finite value leaked into another image"


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_quantized_dtypes_are_refused_with_a_reason(algorithm: str, backend: str) -> None:
    impl = implementation(algorithm, backend)
    kernel = (1, 1) if algorithm == "gemm_1x1" else (3, 3)
    p = ConvProblem(1, 8, 8, 4, 4, *kernel, dtype="QASYMM8")
    params = algorithms.supports(algorithm, p, RULES).params
    verdict = impl.module.supports(p, params, impl.runtime)
    assert not verdict.ok and "QASYMM8" in verdict.reason
