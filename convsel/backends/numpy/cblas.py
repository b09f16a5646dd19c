"""numpy's own OpenBLAS called through its CBLAS interface, for ``C = A·B + C`` (beta = 1).

``numpy.matmul`` has no beta, so a bias that cannot ride in the GEMM as a column of ones
(gemm_1x1 with C + 1 >= K, the indirect GEMM's blocks) costs a pass over the output after
the product. After a two-thread OpenBLAS GEMM that pass reads the half of the output the
other core wrote, and on the quiet host it cost more than the pass alone: ResNet-50's
layer1.0.conv1 (3136x64x64) ran 0.27 ms against 0.17 for its GEMM alone (epilogue alone:
0.03). Filling the output with the bias first (a write-only pass, in the calling thread)
and letting the GEMM add its product (beta = 1) leaves no pass after it.

The library is the one numpy's matmul runs (found by threadpoolctl under numpy's own
folder, as threadpoolctl itself calls ``openblas_set_num_threads`` in it): not scipy's
OpenBLAS, whose threads would fight numpy's (see :mod:`.blas`). Only the ILP64/LP64
symbols whose integer width their name states are used; anything else (another BLAS, a
system OpenBLAS, no threadpoolctl) leaves :func:`sgemm_add` unavailable and the caller on
``numpy.matmul``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
ITEM = 4   # bytes of a float32
# (symbol, integer type): the 64_ suffix is OpenBLAS's mark of 64-bit integers
SYMBOLS = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
           ("scipy_cblas_sgemm", ctypes.c_int))


@cache
def _sgemm() -> Callable[..., None] | None:
    """numpy's OpenBLAS ``cblas_sgemm`` with its argument types set, or None."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        if "numpy" not in str(lib.filepath):   # numpy.libs/ in numpy's wheels
            continue
        dll = ctypes.CDLL(lib.filepath)
        for name, integer in SYMBOLS:
            function = getattr(dll, name, None)
            if function is None:
                continue
            function.restype = None
            function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer,
                                 integer, ctypes.c_float, ctypes.c_void_p, integer,
                                 ctypes.c_void_p, integer, ctypes.c_float, ctypes.c_void_p,
                                 integer]
            return function  # type: ignore[no-any-return]
    return None


def available() -> bool:
    """Whether numpy's OpenBLAS CBLAS ``sgemm`` was found."""
    return _sgemm() is not None


def _operand(m: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a float32 2-D operand as row-major CBLAS
    takes it, or None when neither its rows nor its columns are contiguous."""
    rows, cols = m.shape
    s0, s1 = m.strides
    if s1 == ITEM and s0 % ITEM == 0 and s0 // ITEM >= max(1, cols):
        return NO_TRANS, s0 // ITEM
    if s0 == ITEM and s1 % ITEM == 0 and s1 // ITEM >= max(1, rows):
        return TRANS, s1 // ITEM
    return None


def usable(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Whether :func:`sgemm_add` can run ``out += a @ b``: numpy's OpenBLAS was found and
    the operands are float32 2-D with contiguous rows or columns (``out``: rows)."""
    return _sgemm() is not None and _fits(a, b, out)


def sgemm_add(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out += a @ b`` in numpy's OpenBLAS; call only where :func:`usable` said so (a
    layout BLAS cannot take is refused here too, with ``out`` untouched)."""
    function = _sgemm()
    if function is None or not _fits(a, b, out):
        raise ValueError("sgemm_add: numpy's OpenBLAS not found or operands it cannot take: "
                         f"{a.dtype}{a.shape}{a.strides} @ {b.dtype}{b.shape}{b.strides} -> "
                         f"{out.dtype}{out.shape}{out.strides}")
    flag_a, lda = _operand(a) or (0, 0)
    flag_b, ldb = _operand(b) or (0, 0)
    m, k = a.shape
    n = b.shape[1]
    function(ROW_MAJOR, flag_a, flag_b, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
             1.0, out.ctypes.data, out.strides[0] // ITEM)


def _fits(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    arrays: tuple[Any, ...] = (a, b, out)
    if any(x.dtype != np.float32 or x.ndim != 2 for x in arrays):
        return False
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]) or 0 in out.shape:
        return False
    if a.shape[1] == 0 or not out.flags.writeable:
        return False
    return (_operand(a) is not None and _operand(b) is not None
            and _operand(out) == (NO_TRANS, out.strides[0] // ITEM))
