"""Every registered (algorithm, backend) pair against the float64 reference.

One table drives it: ``convsel.backends.IMPLEMENTATIONS``, from the algorithm registry. A
pair whose backend is not available here is skipped with the reason; nothing else is. Each
test states what it promises to run, and fails when that does not happen: a case the
algorithm's constraint (its home's ``supports``) accepts must run on the backend (a backend
module refusing it fails the test), and a constraint that accepts none of a test's cases
fails it too, so an algorithm cannot pass by running nothing. Problems come from the
packaged layers.json (scaled down, tests/layer_cases.py) and from hypothesis. Outputs start
as NaN on every backend (numpy's fresh arrays, OpenCL's device output buffer before each
run) so an element an algorithm never writes fails, and finite inputs must give finite
outputs. Every variant the registry offers is checked (each Winograd tile, each tile of the
tiled GEMM that fits).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from algorithm_cases import PLAIN, RULES, first_supported
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layer_cases import layer_cases
from problem_sizes import sizes
from tolerances import error_scale, tolerance

from convsel import algorithms, backends
from convsel.activation import KINDS
from convsel.api import prepare
from convsel.backends.numpy import common as numpy_common
from convsel.errors import InvalidProblemError
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference

PAIRS = sorted(backends.IMPLEMENTATIONS)
PAIR_IDS = [f"{a}-{b}" for a, b in PAIRS]
# kernel shapes the rule tables name (the Winograd pairs): drawn as often as 1..5 squares
RULE_KERNELS = sorted({tuple(e.kernel) for rows in RULES.cpu.winograd.values() for e in rows}
                      | {tuple(e.kernel) for rows in RULES.gpu.winograd.pairs.values()
                         for e in rows})


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)
    try:
        from convsel.backends.opencl import prepared as opencl_prepared
    except ImportError:      # no pyopencl: the OpenCL pairs are skipped anyway
        return
    monkeypatch.setattr(opencl_prepared, "OUTPUT_FILL", np.nan)
    from convsel.backends.opencl import implicit_gemm_mma

    # no tensor cores here (PoCL): their variants run with the mma emulated, not refused
    monkeypatch.setattr(implicit_gemm_mma, "EMULATE_WITHOUT_TENSOR_CORES", True)


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
    """The pair's module and runtime, or a pytest skip when the backend cannot run here (no
    pyopencl, no device). A module that does not import is an error, not a skip."""
    ready = backends.available(backend)
    if not ready.ok:
        pytest.skip(f"{backend} backend unavailable: {ready.reason}")
    module = importlib.import_module(backends.IMPLEMENTATIONS[(algorithm, backend)])
    return Impl(algorithm, backend, module, _runtime(backend))


def promised(algorithm: str, p: ConvProblem) -> list[dict[str, Any]]:
    """The resolved params of every variant of ``algorithm`` (its home's ``variants``) that
    its constraint accepts on ``p``: what the suite promises to run ([] when it refuses)."""
    if not algorithms.supports(algorithm, p, RULES).ok:
        return []
    found = []
    for params in algorithms.variants(algorithm, p, RULES):
        verdict = algorithms.supports(algorithm, p, RULES, params)
        if verdict.ok:
            found.append({**params, **verdict.params})
    assert found, f"{algorithm} accepts {p} but none of its variants"
    return found


def random_data(p: ConvProblem, seed: int, with_bias: bool = True,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = rng.standard_normal(p.weights_shape).astype(dtype)
    bias = rng.standard_normal(p.k).astype(dtype) if with_bias else None
    return x, w, bias


def check(impl: Impl, p: ConvProblem, params: dict[str, Any], seed: int,
          with_bias: bool = True) -> str | None:
    """Run one promised problem (``params`` resolved, as convsel.execute hands them down);
    the failure description, or None when it ran and passed."""
    backend = impl.module.supports(p, params, impl.runtime)
    if not backend.ok:
        return (f"{p} {params}: the {impl.backend} module refuses a problem the algorithm's "
                f"constraint accepts: {backend.reason}")
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


def run_cases(impl: Impl, cases: Sequence[tuple[str, ConvProblem]]) -> None:
    """Run every (case, variant) the algorithm's constraint accepts; fail when it accepts
    none of ``cases``, when one fails, or when fewer ran than were promised."""
    todo = [(seed, name, p, params) for seed, (name, p) in enumerate(cases)
            for params in promised(impl.algorithm, p)]
    assert todo, (f"{impl.algorithm}'s supports() accepts none of the {len(cases)} cases: "
                  "it would pass having run nothing")
    failures, ran = [], 0
    for seed, name, p, params in todo:
        failure = check(impl, p, params, seed)
        ran += failure is None
        if failure:
            failures.append(f"{name}: {failure}")
    assert not failures, f"{len(failures)} of {len(todo)} failed:\n" + "\n".join(failures)
    assert ran == len(todo), f"ran {ran} of the {len(todo)} promised cases"


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
def drawn_problems(draw: st.DrawFn, max_hw: int, max_channels: int) -> ConvProblem:
    """A random valid problem: any kernel (1..5 per axis, or one the rule tables name),
    stride, dilation, padding, grouping, activation and dtype."""
    kh, kw = draw(st.one_of(st.sampled_from(RULE_KERNELS),
                            st.tuples(st.integers(1, 5), st.integers(1, 5))))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    ext = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    pads = tuple(draw(st.integers(0, ext[i // 2] - 1)) for i in range(4))
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, max(1, max_channels // groups)))
    kg = draw(st.integers(1, max(1, max_channels // groups)))
    low_h, low_w = max(1, ext[0] - pads[0] - pads[1]), max(1, ext[1] - pads[2] - pads[3])
    h = draw(st.integers(low_h, max(low_h, max_hw)))
    w = draw(st.integers(low_w, max(low_w, max_hw)))
    kind = draw(st.sampled_from([None, *sorted(KINDS)]))
    return ConvProblem(draw(st.integers(1, 3)), h, w, cg * groups, kg * groups, kh, kw,
                       stride=stride, pad=pads, dilation=dilation, groups=groups,
                       dtype=draw(st.sampled_from(["F32", "F32", "F16"])), activation=kind)


# Plainer versions of a drawn problem, tried in turn until the algorithm's constraint
# accepts one: each drops some generality (groups, the kernel, stride and dilation), so an
# algorithm is tested on the most general of them it can run; none is named here.
_PLAINER: tuple[dict[str, Any], ...] = (
    {},
    {"groups": 1},
    {"groups": 1, "kernel": (1, 1)},
    {"groups": 1, "stride": (1, 1), "dilation": (1, 1)},
    {"groups": 1, "stride": (1, 1), "dilation": (1, 1), "kernel": (3, 3)},
    {"groups": 1, "stride": (1, 1), "dilation": (1, 1), "kernel": (1, 1)},
)


def _plainer(p: ConvProblem, how: dict[str, Any]) -> ConvProblem | None:
    changes: dict[str, Any] = {}
    if "groups" in how:
        changes["groups"] = how["groups"]
    if "stride" in how:
        changes.update(stride=how["stride"], dilation=how["dilation"])
    if "kernel" in how:
        kh, kw = how["kernel"]
        changes.update(kh=kh, kw=kw, h=max(p.h, kh), w=max(p.w, kw),
                       pad=tuple(min(v, (kh, kh, kw, kw)[i] - 1) for i, v in enumerate(p.pad)))
    try:
        return p.replace(**changes)
    except InvalidProblemError:   # e.g. a bigger kernel than the padded input
        return None


def fitted(algorithm: str, drawn: ConvProblem) -> ConvProblem:
    """The first of ``drawn``'s plainer versions that ``algorithm`` accepts; an
    AssertionError when it accepts none (a constraint that refuses everything)."""
    for how in _PLAINER:
        p = _plainer(drawn, how)
        if p is not None and algorithms.supports(algorithm, p, RULES).ok:
            return p
    raise AssertionError(f"{algorithm}'s supports() accepts no plain version of {drawn}")


@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_random_problems(algorithm: str, backend: str) -> None:
    impl = implementation(algorithm, backend)
    s = sizes(backend)
    ran = []

    @settings(max_examples=s.max_examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(drawn=drawn_problems(s.max_random_hw, s.max_random_channels),
           seed=st.integers(0, 2**16), with_bias=st.booleans())
    def one(drawn: ConvProblem, seed: int, with_bias: bool) -> None:
        p = fitted(algorithm, drawn)
        for params in promised(algorithm, p):
            failure = check(impl, p, params, seed, with_bias)
            assert failure is None, failure
            ran.append(p)

    one()
    assert len(ran) >= s.max_examples, f"ran {len(ran)} of {s.max_examples} examples"


_LAYOUT_AXES = {"OHWI": (0, 1, 2, 3), "HWIO": (1, 2, 3, 0), "OIHW": (0, 3, 1, 2)}


@pytest.mark.filterwarnings("error::convsel.errors.FallbackWarning")
@pytest.mark.parametrize(("algorithm", "backend"), PAIRS, ids=PAIR_IDS)
def test_public_path_layouts_bias_and_activations(algorithm: str, backend: str) -> None:
    """Through convsel.prepare: every weights layout, NHWC and NCHW, each activation kind
    in turn; a fallback to another backend is an error here."""
    impl = implementation(algorithm, backend)
    plain = first_supported(algorithm, PLAIN)
    kinds = sorted(KINDS)
    cases = [(wl, layout) for wl in _LAYOUT_AXES for layout in ("NHWC", "NCHW")]
    for i, (weights_layout, layout) in enumerate(cases):
        p = plain.replace(layout=layout,
                          activation=kinds[(i * 5 + len(algorithm)) % len(kinds)])
        params = algorithms.supports(algorithm, p, RULES).params
        backend_verdict = impl.module.supports(p, params, impl.runtime)
        assert backend_verdict.ok, (str(p), backend_verdict.reason)
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
    p = first_supported(algorithm, PLAIN).replace(h=8, c=4, k=5)
    params = promised(algorithm, p)[0]
    backend_verdict = impl.module.supports(p, params, impl.runtime)
    assert backend_verdict.ok, (str(p), backend_verdict.reason)
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
    p = first_supported(algorithm, PLAIN).replace(dtype="QASYMM8")
    params = algorithms.supports(algorithm, p, RULES).params
    verdict = impl.module.supports(p, params, impl.runtime)
    assert not verdict.ok and "QASYMM8" in verdict.reason
