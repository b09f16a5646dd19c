"""GEMMs with the bias folded in, through BLAS's ``C = A·B + beta·C``.

``numpy.matmul`` computes ``A·B`` into C (OpenBLAS clears C first when beta is 0), and a
separate ``y += bias`` then reads and writes the whole output again: a quarter to a third
of a ResNet 1x1 layer's time at batch 1. Filling C with the bias and calling sgemm with
beta = 1 replaces the clearing pass with the bias and drops the extra pass. scipy's
wrapper is column-major, so a row-major ``Y = A·B`` is passed as ``Yᵀ = Bᵀ·Aᵀ``: all three
are then Fortran-ordered views of the same memory and nothing is copied.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.blas import sgemm

from .profile import phase


def gemm_bias(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> None:
    """``out[...] = a @ b + bias`` (float32; ``a`` row- or column-major, ``b`` and ``out``
    row-major 2-D; ``bias`` of length ``out.shape[1]`` or None)."""
    with phase("blas"):
        if bias is None:
            np.matmul(a, b, out=out)
            return
        out[...] = bias
        if a.flags.f_contiguous and not a.flags.c_contiguous:
            result = sgemm(1.0, b.T, a, beta=1.0, c=out.T, overwrite_c=1, trans_b=1)
        else:
            result = sgemm(1.0, b.T, a.T, beta=1.0, c=out.T, overwrite_c=1)
    if not np.may_share_memory(result, out):   # a wrapper that copied: never lose the result
        out[...] = result.T
