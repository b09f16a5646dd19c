"""conv2d()/prepare() on the numpy backend: layouts, activations, groups, prepared reuse,
workspace claims, and the errors for what cannot or must not run."""

from __future__ import annotations

import re

import numpy as np
import pytest
from algorithm_cases import RULES, accepts, first_supported, implemented_on
from layer_cases import raw_layers
from tolerances import assert_within_tolerance

from convsel import algorithms
from convsel.activation import KINDS
from convsel.api import conv2d, prepare
from convsel.backends.numpy import common as numpy_common
from convsel.errors import InvalidProblemError, UnsupportedError
from convsel.problem import ConvProblem

ALGORITHMS = implemented_on("numpy")


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)


def _data(shape_x, shape_w, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape_x).astype(dtype), rng.standard_normal(shape_w).astype(dtype),
            rng.standard_normal(shape_w[0]).astype(dtype))


def _geometry(p: ConvProblem) -> dict:
    """conv2d()'s keyword arguments for ``p``'s geometry."""
    return {"stride": p.stride, "pad": p.pad, "dilation": p.dilation}


# Each algorithm runs the first of these its constraint accepts.
CASES = (ConvProblem(2, 9, 8, 5, 6, 3, 3, pad=(1, 1, 0, 2)),
         ConvProblem(2, 9, 8, 5, 6, 1, 1, stride=(1, 2)))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("weights_layout", ["OHWI", "HWIO", "OIHW"])
def test_weights_layouts_agree(algorithm: str, weights_layout: str) -> None:
    p = first_supported(algorithm, CASES)
    x, w, b = _data(p.input_shape, p.weights_shape)
    order = {"OHWI": (0, 1, 2, 3), "HWIO": (1, 2, 3, 0), "OIHW": (0, 3, 1, 2)}[weights_layout]
    y = conv2d(x, np.transpose(w, order), b, weights_layout=weights_layout, algorithm=algorithm,
               **_geometry(p))
    assert_within_tolerance(p, x, w, b, y, algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nchw_in_nchw_out(algorithm: str) -> None:
    p = first_supported(algorithm, CASES)
    x, w, b = _data(p.input_shape, p.weights_shape)
    y = conv2d(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), w, b, layout="NCHW",
               algorithm=algorithm, **_geometry(p))
    assert y.shape == (p.n, p.k, p.out_h, p.out_w)
    assert_within_tolerance(p, x, w, b, np.ascontiguousarray(y.transpose(0, 2, 3, 1)), algorithm)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_fused_activation(kind: str) -> None:
    for algorithm in ALGORITHMS:
        p = first_supported(algorithm, (ConvProblem(1, 7, 7, 4, 5, 3, 3, pad=1),
                                        ConvProblem(1, 7, 7, 4, 5, 1, 1)))
        p = p.replace(activation=kind)
        x, w, b = _data(p.input_shape, p.weights_shape, seed=3)
        y = conv2d(x, w, b, activation=kind, algorithm=algorithm, **_geometry(p))
        assert_within_tolerance(p, x, w, b, y, algorithm)


GROUPED = [(6, 6), (6, 12), (3, 9)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("groups,k", GROUPED)
def test_groups_inferred_from_weights(algorithm: str, groups: int, k: int) -> None:
    p = ConvProblem(2, 10, 11, 6, k, 3, 3, stride=(2, 1), pad=(1, 0, 1, 1), groups=groups)
    refused = algorithms.supports(algorithm, p, RULES)
    if not refused.ok:    # named, it must say why rather than run something else
        with pytest.raises(UnsupportedError, match=re.escape(refused.reason)):
            conv2d(*_data(p.input_shape, p.weights_shape)[:2], algorithm=algorithm,
                   **_geometry(p))
        return
    x, w, b = _data(p.input_shape, p.weights_shape)
    y = conv2d(x, w, b, algorithm=algorithm, **_geometry(p))
    assert_within_tolerance(p, x, w, b, y, algorithm)


@pytest.mark.parametrize("p", [
    ConvProblem(1, 12, 13, 6, 12, 3, 3, pad=1, groups=6, activation="relu"),
    ConvProblem(2, 15, 11, 4, 12, 5, 5, stride=2, pad=(2, 1, 0, 2), groups=4),
    ConvProblem(1, 16, 16, 3, 6, 7, 7, dilation=2, pad=3, groups=3, dtype="F16"),
])
def test_a_channel_multiplier_runs_as_depthwise_on_the_repeated_input(p: ConvProblem) -> None:
    from convsel.backends.numpy.direct import ChannelMultiplier

    dtype = np.float16 if p.dtype == "F16" else np.float32
    x, w, b = _data(p.input_shape, p.weights_shape, seed=5, dtype=dtype)
    op = prepare(p, w, b, algorithm="direct")   # the activation is part of the problem
    kernel = op.kernel
    assert isinstance(kernel, ChannelMultiplier)
    inner = kernel.depthwise.problem
    assert (inner.c, inner.groups, inner.k) == (p.k, p.k, p.k) and inner.is_depthwise
    assert_within_tolerance(p, x, w, b, op.run(x), "direct")
    assert_within_tolerance(p, 2 * x, w, b, op.run(2 * x), "direct")   # the buffer reused


def test_grouped_problems_run_somewhere() -> None:
    assert any(accepts(a, ConvProblem(2, 10, 11, 6, k, 3, 3, groups=g))
               for a in ALGORITHMS for g, k in GROUPED)


def test_f16_is_half_in_half_out() -> None:
    for algorithm in ALGORITHMS:
        p = first_supported(algorithm, CASES).replace(dtype="F16")
        x, w, b = _data(p.input_shape, p.weights_shape, dtype=np.float16)
        y = conv2d(x, w, b, algorithm=algorithm, **_geometry(p))
        assert_within_tolerance(p, x, w, b, y, algorithm)


def test_prepared_op_reuses_weights_and_reports_itself() -> None:
    p = ConvProblem(1, 12, 12, 8, 8, 3, 3, pad=1)
    x, w, b = _data(p.input_shape, p.weights_shape)
    op = prepare(p, w, b, algorithm="winograd", tile=(2, 2))
    assert (op.algorithm, op.method, op.backend) == ("winograd", "WINOGRAD", "numpy")
    assert op.workspace_bytes > 0
    given = w.copy()
    w[:] = 0   # the op holds its own transformed copy
    assert_within_tolerance(p, x, given, b, op.run(x), "winograd")
    assert_within_tolerance(p, 2 * x, given, b, op.run(x * 2), "winograd")


def test_auto_runs_the_selected_algorithm() -> None:
    p = ConvProblem(1, 8, 8, 16, 16, 1, 1)
    x, w, b = _data(p.input_shape, p.weights_shape)
    op = prepare(p, w, b)
    assert op.algorithm == op.selection.algorithm
    assert_within_tolerance(p, x, w, b, op.run(x), op.algorithm)


def test_gemm_1x1_copies_nothing_at_unit_stride() -> None:
    p = ConvProblem(1, 8, 8, 16, 16, 1, 1)
    assert prepare(p, _data(p.input_shape, p.weights_shape)[1], algorithm="gemm_1x1"
                   ).workspace_bytes == 0


def test_direct_workspace_is_a_tenth_of_im2col_on_large_kernels() -> None:
    layers = [ly for ly in raw_layers() if (ly["kh"], ly["kw"]) in ((7, 7), (9, 9))]
    assert layers
    for ly in layers:
        p = ConvProblem(ly["n"], ly["h"], ly["w"], ly["c"], ly["k"], ly["kh"], ly["kw"],
                        stride=ly["stride"], pad=ly["pad"], groups=ly["groups"])
        w = np.zeros(p.weights_shape, np.float32)
        direct = prepare(p, w, algorithm="direct").workspace_bytes
        im2col = prepare(p, w, algorithm="im2col_gemm").workspace_bytes
        assert direct * 10 <= im2col, (ly["name"], direct, im2col)


@pytest.mark.parametrize(("algorithm", "problem", "reason"), [
    ("winograd", ConvProblem(1, 8, 8, 4, 4, 3, 3, stride=2, pad=1), "stride"),
    ("winograd", ConvProblem(1, 8, 8, 4, 4, 9, 9, pad=4), "9x9"),
    ("gemm_1x1", ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1), "1x1"),
    ("indirect_gemm", ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1, groups=2), "group"),
    ("fft", ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1, groups=4), "group"),
])
def test_named_algorithm_that_cannot_run_says_why(algorithm, problem, reason) -> None:
    w = np.zeros(problem.weights_shape, np.float32)
    with pytest.raises(UnsupportedError, match=reason):
        prepare(problem, w, algorithm=algorithm)


def test_winograd_tile_not_paired_with_kernel() -> None:
    p = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1)
    with pytest.raises(UnsupportedError, match="tile"):
        prepare(p, np.zeros(p.weights_shape, np.float32), algorithm="winograd", tile=(6, 6))


def test_quantized_problem_is_unsupported_not_wrong() -> None:
    p = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1, dtype="QASYMM8")
    with pytest.raises(UnsupportedError, match="QASYMM8"):
        prepare(p, np.zeros(p.weights_shape, np.float32), algorithm="direct")


@pytest.mark.parametrize(("call", "field"), [
    (lambda x, w, b: conv2d(x[..., :3], w, b), "w"),                     # channels
    (lambda x, w, b: conv2d(x[0], w, b), "x"),                           # rank
    (lambda x, w, b: conv2d(x.astype(np.int32), w, b), "x"),             # dtype
    (lambda x, w, b: conv2d(x, w.astype(np.int64), b), "w"),
    (lambda x, w, b: conv2d(x, w, b[:-1]), "bias"),
    (lambda x, w, b: conv2d(x, w, b.astype(np.int8)), "bias"),
    (lambda x, w, b: conv2d(x, w, b, weights_layout="IHWO"), "weights_layout"),
    (lambda x, w, b: conv2d(x, w, b, algorithm="magic"), "algorithm"),
])
def test_bad_input_names_the_argument(call, field) -> None:
    x, w, b = _data((1, 8, 8, 4), (5, 3, 3, 4))
    with pytest.raises(InvalidProblemError) as info:
        call(x, w, b)
    assert info.value.field == field


def test_prepared_run_checks_x() -> None:
    p = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1)
    op = prepare(p, np.zeros(p.weights_shape, np.float32), algorithm="direct")
    for bad in (np.zeros((1, 8, 8, 5), np.float32), np.zeros((1, 8, 8, 4), np.int16), [1.0]):
        with pytest.raises(InvalidProblemError) as info:
            op.run(bad)
        assert info.value.field == "x"


@pytest.mark.parametrize(("algorithm", "problem"), [
    ("im2col_gemm", ConvProblem(2, 13, 11, 5, 6, 3, 3, stride=(2, 1), pad=(1, 0, 1, 1))),
    ("im2col_gemm", ConvProblem(2, 13, 11, 6, 6, 3, 3, pad=1, groups=3)),
    ("winograd", ConvProblem(2, 15, 11, 5, 6, 3, 3, pad=(1, 0, 1, 1))),
    ("fft", ConvProblem(2, 40, 23, 3, 4, 3, 3, stride=(3, 2), pad=(1, 2, 0, 1))),
])
def test_big_problems_run_in_pieces(monkeypatch, algorithm, problem) -> None:
    """Under a tiny workspace cap every algorithm that bands its work still writes every
    output (NaN-filled buffer) and reports a workspace within reach of the cap."""
    full = prepare(problem, np.zeros(problem.weights_shape, np.float32), algorithm=algorithm)
    monkeypatch.setattr(numpy_common, "WORKSPACE_CAP", 2048)
    x, w, b = _data(problem.input_shape, problem.weights_shape, seed=5)
    op = prepare(problem, w, b, algorithm=algorithm)
    assert op.workspace_bytes < full.workspace_bytes
    assert_within_tolerance(problem, x, w, b, op.run(x), algorithm)
