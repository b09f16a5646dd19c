"""numpy's OpenBLAS through CBLAS with beta = 1 (convsel.backends.numpy.cblas): the bias
filled into the output first and the product added to it, against float64."""

from __future__ import annotations

import numpy as np
import pytest

from convsel.backends.numpy import blas, cblas
from convsel.backends.numpy.blas import gemm_bias

pytestmark = pytest.mark.skipif(not cblas.available(),
                                reason="numpy's BLAS is not an OpenBLAS with a CBLAS sgemm")


def _bound(a: np.ndarray, b: np.ndarray) -> float:
    return 1e-5 * float(np.abs(a).sum(1).max() * np.abs(b).max()) * 2 + 1e-6


def _operand(rng: np.random.Generator, shape: tuple[int, int], layout: str) -> np.ndarray:
    """'C', 'F', or 'rows' (C order with a leading dimension wider than the row)."""
    if layout == "rows":
        wide = rng.standard_normal((shape[0], shape[1] + 3)).astype(np.float32)
        return wide[:, : shape[1]]
    return np.asarray(rng.standard_normal(shape), dtype=np.float32, order=layout)


@pytest.mark.parametrize("layout_a", ["C", "F", "rows"])
@pytest.mark.parametrize("layout_b", ["C", "F", "rows"])
@pytest.mark.parametrize(("m", "k", "n"), [(37, 19, 23), (1, 1, 1), (1, 64, 7), (300, 3, 1)])
def test_sgemm_add_adds_the_product(layout_a: str, layout_b: str, m: int, k: int, n: int):
    rng = np.random.default_rng(m * 100 + k)
    a, b = _operand(rng, (m, k), layout_a), _operand(rng, (k, n), layout_b)
    start = rng.standard_normal((m, n)).astype(np.float32)
    out = start.copy()
    assert cblas.usable(a, b, out)
    cblas.sgemm_add(a, b, out)
    want = start.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out - want).max() <= _bound(a, b)


@pytest.mark.parametrize("accelerated", [True, False])
def test_gemm_bias_overwrites_a_nan_filled_output(accelerated: bool):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((131, 64)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    out = np.full((131, 48), np.nan, np.float32)
    gemm_bias(a, b, bias, out, accelerated)
    want = a.astype(np.float64) @ b.astype(np.float64) + bias
    assert np.abs(out - want).max() <= _bound(a, b)


def test_the_switch_gives_the_same_result_and_nan_inf_reach_the_output():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((50, 30)).astype(np.float32)
    a[3, 4], a[7, 0] = np.nan, np.inf
    b = rng.standard_normal((30, 20)).astype(np.float32)
    bias = rng.standard_normal(20).astype(np.float32)
    outs = []
    for first in (True, False):
        out = np.full((50, 20), np.nan, np.float32)
        previous, blas.cblas_first = blas.cblas_first, first
        try:
            gemm_bias(a, b, bias, out, True)
        finally:
            blas.cblas_first = previous
        outs.append(out)
    assert np.isnan(outs[0][3]).all() and not np.isfinite(outs[0][7]).any()
    np.testing.assert_array_equal(np.isnan(outs[0]), np.isnan(outs[1]))
    np.testing.assert_array_equal(np.isinf(outs[0]), np.isinf(outs[1]))
    fine = np.isfinite(outs[1])
    assert np.abs(outs[0][fine] - outs[1][fine]).max() <= _bound(a[8:], b)


def test_layouts_blas_cannot_take_are_refused_and_fall_back():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 20)).astype(np.float32)
    b = rng.standard_normal((10, 9)).astype(np.float32)
    bias = rng.standard_normal(9).astype(np.float32)
    strided = a[::2, ::2]                       # neither rows nor columns contiguous
    out = np.full((20, 9), np.nan, np.float32)
    assert not cblas.usable(strided, b, out)
    assert not cblas.usable(strided.copy(), b, out.T.copy().T)   # output in column order
    assert not cblas.usable(strided.copy().astype(np.float64), b, out)
    with pytest.raises(ValueError, match="sgemm_add"):
        cblas.sgemm_add(strided, b, out)
    assert np.isnan(out).all()                  # refused before anything was written
    gemm_bias(strided, b, bias, out, True)      # numpy.matmul then the bias
    want = strided.astype(np.float64) @ b.astype(np.float64) + bias
    assert np.abs(out - want).max() <= _bound(strided, b)
