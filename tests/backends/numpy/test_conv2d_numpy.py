"""conv2d()/prepare() on the numpy backend: layouts, activations, groups, prepared reuse,
workspace claims, and the errors for what cannot or must not run."""

from __future__ import annotations

import numpy as np
import pytest
from layer_cases import raw_layers
from tolerances import tolerance

from convsel.activation import KINDS
from convsel.api import conv2d, prepare
from convsel.backends.numpy import common as numpy_common
from convsel.errors import InvalidProblemError, UnsupportedError
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference

ALGORITHMS = ["direct", "im2col_gemm", "indirect_gemm", "winograd", "fft"]


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)


def _data(shape_x, shape_w, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape_x).astype(dtype), rng.standard_normal(shape_w).astype(dtype),
            rng.standard_normal(shape_w[0]).astype(dtype))


def _close(y, ref, algorithm="im2col_gemm", dtype="F32"):
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(y.astype(np.float64) - ref).max() <= 20 * tolerance(algorithm, dtype) * scale


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("weights_layout", ["OHWI", "HWIO", "OIHW"])
def test_weights_layouts_agree(algorithm: str, weights_layout: str) -> None:
    x, w, b = _data((2, 9, 8, 5), (6, 3, 3, 5))
    p = ConvProblem(2, 9, 8, 5, 6, 3, 3, pad=(1, 1, 0, 2))
    order = {"OHWI": (0, 1, 2, 3), "HWIO": (1, 2, 3, 0), "OIHW": (0, 3, 1, 2)}[weights_layout]
    y = conv2d(x, np.transpose(w, order), b, pad=(1, 1, 0, 2), weights_layout=weights_layout,
               algorithm=algorithm)
    _close(y, conv2d_reference(p, x, w, b), algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nchw_in_nchw_out(algorithm: str) -> None:
    x, w, b = _data((2, 9, 8, 5), (6, 3, 3, 5))
    p = ConvProblem(2, 9, 8, 5, 6, 3, 3, pad=1)
    y = conv2d(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), w, b, pad=1, layout="NCHW",
               algorithm=algorithm)
    assert y.shape == (2, 6, 9, 8)
    _close(y.transpose(0, 2, 3, 1), conv2d_reference(p, x, w, b), algorithm)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_fused_activation(kind: str) -> None:
    x, w, b = _data((1, 7, 7, 4), (5, 3, 3, 4), seed=3)
    p = ConvProblem(1, 7, 7, 4, 5, 3, 3, pad=1, activation=kind)
    for algorithm in ALGORITHMS:
        _close(conv2d(x, w, b, pad=1, activation=kind, algorithm=algorithm),
               conv2d_reference(p, x, w, b), algorithm)


@pytest.mark.parametrize("algorithm", ["direct", "im2col_gemm"])
@pytest.mark.parametrize("groups,k", [(6, 6), (6, 12), (3, 9)])
def test_groups_inferred_from_weights(algorithm: str, groups: int, k: int) -> None:
    x, w, b = _data((2, 10, 11, 6), (k, 3, 3, 6 // groups))
    p = ConvProblem(2, 10, 11, 6, k, 3, 3, stride=(2, 1), pad=(1, 0, 1, 1), groups=groups)
    y = conv2d(x, w, b, stride=(2, 1), pad=(1, 0, 1, 1), algorithm=algorithm)
    _close(y, conv2d_reference(p, x, w, b), algorithm)


def test_f16_is_half_in_half_out() -> None:
    x, w, b = _data((1, 8, 8, 4), (4, 3, 3, 4), dtype=np.float16)
    for algorithm in ALGORITHMS:
        y = conv2d(x, w, b, pad=1, algorithm=algorithm)
        assert y.dtype == np.float16


def test_prepared_op_reuses_weights_and_reports_itself() -> None:
    p = ConvProblem(1, 12, 12, 8, 8, 3, 3, pad=1)
    x, w, b = _data(p.input_shape, p.weights_shape)
    op = prepare(p, w, b, algorithm="winograd", tile=(2, 2))
    assert (op.algorithm, op.method, op.backend) == ("winograd", "WINOGRAD", "numpy")
    assert op.workspace_bytes > 0
    w[:] = 0   # the op holds its own transformed copy
    first, second = op.run(x), op.run(x * 2)
    _close(second, 2 * first.astype(np.float64) - conv2d_reference(p, np.zeros_like(x),
                                                                      w, b), "winograd")


def test_auto_runs_the_selected_algorithm() -> None:
    p = ConvProblem(1, 8, 8, 16, 16, 1, 1)
    x, w, b = _data(p.input_shape, p.weights_shape)
    op = prepare(p, w, b)
    assert op.algorithm == op.selection.algorithm
    _close(op.run(x), conv2d_reference(p, x, w, b))


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
    _close(op.run(x), conv2d_reference(problem, x, w, b), algorithm)
