"""Bias and activation after a GEMM, in one pass over the output (in the calling thread:
the GEMM's threads have the other cores, :func:`~convsel.backends.numpy.fused.spread`).

numpy adds the bias in one pass and applies an activation in one or more (a clip is
two); here each block of rows gets both while it is in cache.
"""

from __future__ import annotations

import numpy as np

from . import alone, jit
from .activation import activate

ROWS_PER_BLOCK = 64   # rows of the output finished together (a block stays in L2)


@jit()
def _bias_activation(first: int, last: int, y: np.ndarray, bias: np.ndarray, with_bias: bool,
                     code: int, a: np.float32, b: np.float32) -> None:
    rows, k = y.shape
    for block in range(first, last):
        start = block * ROWS_PER_BLOCK
        stop = min(rows, start + ROWS_PER_BLOCK)
        if with_bias:
            for r in range(start, stop):
                row = y[r]
                for j in range(k):
                    row[j] += bias[j]
        activate(y[start:stop].reshape((stop - start) * k), code, a, b)


def bias_activation(y: np.ndarray, bias: np.ndarray | None,
                    activation: tuple[int, np.float32, np.float32]) -> None:
    """``y[...] = act(y + bias)`` in place; ``y`` float32, C-contiguous, last axis the
    channels; ``bias`` of that length or None."""
    k = y.shape[-1]
    with_bias = bias is not None
    rows = y.reshape(-1, k)
    blocks = -(-rows.shape[0] // ROWS_PER_BLOCK)
    alone(_bias_activation, blocks, rows, bias if with_bias else np.zeros(k, np.float32),
          with_bias, *activation)
