"""GEMM plus bias.

``numpy.matmul`` has no ``C = A·B + beta·C``; scipy's ``sgemm`` wrapper has, and filling the
output with the bias then calling it with beta = 1 saved a pass over the output (56x56
256->64 1x1: 0.51 -> 0.45 ms). But scipy ships its own OpenBLAS, whose threads spin-wait
after each call just as numpy's do: alternating the two libraries, as a network whose layers
use both would, made each pair of GEMMs 10x slower on two cores (0.82 ms -> 7.7-9.5 ms,
measured). So every GEMM here goes through one library (:func:`.gemm.matmul`: numpy's
BLAS, or oneMKL for all of them); the algorithms avoid the bias
pass where they can instead (a column of ones beside the GEMM's left matrix and the bias as
an extra weight row: gemm_1x1 when C + 1 < K, im2col always), and this helper adds the bias
right after the product, while the block is in cache, where they cannot.
"""

from __future__ import annotations

import numpy as np

from .gemm import matmul
from .mkl import PackedB
from .profile import phase


def gemm_bias(a: np.ndarray, b: np.ndarray | PackedB, bias: np.ndarray | None,
              out: np.ndarray, accelerated: bool = False) -> None:
    """``out[...] = a @ b + bias`` (float32 2-D; ``bias`` of length ``out.shape[1]`` or None;
    ``accelerated``: the bias added by the cpu extra's threaded epilogue)."""
    with phase("blas"):
        matmul(a, b, out)
    if bias is not None and accelerated and out.flags.c_contiguous:
        from .fused.activation import code_of
        from .fused.epilogue import bias_activation

        with phase("epilogue"):
            bias_activation(out, bias, code_of(None))
    elif bias is not None:
        with phase("epilogue"):
            np.add(out, bias, out=out)
