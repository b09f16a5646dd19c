"""GEMM plus bias, on numpy's own BLAS only.

``numpy.matmul`` has no ``C = A·B + beta·C``; scipy's ``sgemm`` wrapper has, and filling the
output with the bias then calling it with beta = 1 saved a pass over the output (56x56
256->64 1x1: 0.51 -> 0.45 ms). But scipy ships its own OpenBLAS, whose threads spin-wait
after each call just as numpy's do: alternating the two libraries, as a network whose layers
use both would, made each pair of GEMMs 10x slower on two cores (0.82 ms -> 7.7-9.5 ms,
measured). So every GEMM here goes through numpy's own OpenBLAS; the algorithms avoid the
bias pass where they can (a column of ones beside the GEMM's left matrix and the bias as
an extra weight row: gemm_1x1 when C + 1 < K, im2col always). Where they cannot, this
helper fills the output with the bias and has numpy's OpenBLAS add the product (beta = 1,
through its CBLAS interface, :mod:`.cblas`) with the cpu extra, and otherwise (pure numpy,
the reference) runs ``numpy.matmul`` and adds the bias right after the product.
"""

from __future__ import annotations

import numpy as np

from . import cblas
from .profile import phase

# Whether the bias goes in first and the GEMM adds to it (beta = 1, :mod:`.cblas`) where
# it can; a switch for interleaved timing against the matmul-then-bias path.
cblas_first = True


def gemm_bias(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
              accelerated: bool = False) -> None:
    """``out[...] = a @ b + bias`` (float32 2-D; ``bias`` of length ``out.shape[1]`` or None;
    ``accelerated``: with the cpu extra, the output is filled with the bias and numpy's
    OpenBLAS adds the product to it (:mod:`.cblas`), else the bias is added by the fused
    epilogue after the product)."""
    if bias is not None and accelerated and cblas_first and cblas.usable(a, b, out):
        with phase("epilogue"):
            out[...] = bias
        with phase("blas"):
            cblas.sgemm_add(a, b, out)
        return
    with phase("blas"):
        np.matmul(a, b, out=out)
    if bias is not None and accelerated and out.flags.c_contiguous:
        from .fused.activation import code_of
        from .fused.epilogue import bias_activation

        with phase("epilogue"):
            bias_activation(out, bias, code_of(None))
    elif bias is not None:
        with phase("epilogue"):
            np.add(out, bias, out=out)
