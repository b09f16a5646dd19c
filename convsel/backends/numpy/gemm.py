"""Which library runs the numpy backend's GEMMs, and :func:`matmul`, their one entrance.

Every product of the backend goes through :func:`matmul`, which runs oneMKL's GEMM where
:func:`library` says so (the ``mkl`` extra, :mod:`.mkl`) and numpy's own BLAS (OpenBLAS in
numpy's wheels) otherwise. One library for all of a process's products: two BLAS libraries
taking turns fight over the cores, each one's threads spinning after its calls
(:mod:`.blas` says what that cost with scipy's OpenBLAS beside numpy's).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ... import config
from ...errors import InvalidProblemError
from ...verdict import Verdict
from .mkl import PackedB

FIELD = "gemm"
CHOICES = ("auto", "numpy", "mkl")

_chosen: str | None = None   # None: CONVSEL_GEMM's value, read at the first product


def use_gemm(name: str) -> None:
    """Multiply with ``name`` from now on, process-wide: ``"numpy"`` (numpy's BLAS),
    ``"mkl"`` (oneMKL; numpy's BLAS where it cannot load, :func:`describe` says why) or
    ``"auto"``.

    Raises
    ------
    InvalidProblemError
        ``name`` is not one of CHOICES.
    """
    if name not in CHOICES:
        raise InvalidProblemError(config.variable(FIELD), name,
                                  f"must be one of {', '.join(CHOICES)}")
    global _chosen
    _chosen = name


def chosen() -> str:
    """The setting in force: use_gemm's, else ``CONVSEL_GEMM``'s (default ``auto``)."""
    if _chosen is None:
        use_gemm((config.current().gemm or "auto").strip().lower())
    assert _chosen is not None
    return _chosen


def library() -> str:
    """``"mkl"`` or ``"numpy"``: who runs the products now. ``auto`` takes oneMKL on Intel
    CPUs where it loads: on the AMD EPYC development machine MKL's GEMM ran a 3136 x 576 x 64
    product 2.1x slower than OpenBLAS (4.1 against 1.9 ms), on the Intel quiet host faster
    (benchmarks/NOTES-cpu.md, "oneMKL")."""
    return _library_for(chosen())


@cache
def _library_for(setting: str) -> str:
    if setting == "numpy":
        return "numpy"
    from . import mkl

    if not mkl.available().ok:
        return "numpy"
    return "mkl" if setting == "mkl" or _intel_cpu() else "numpy"


def describe() -> str:
    """For the device key and /v1/backends: the library that multiplies, and why where
    the setting asked for another."""
    from . import mkl

    if library() == "mkl":
        return f"GEMM by {mkl.available().reason}"
    setting = chosen()
    ready: Verdict = mkl.available() if setting == "mkl" else Verdict(True, "")
    return "GEMM by numpy's BLAS" + ("" if ready.ok else f" (oneMKL asked for: {ready.reason})")


def _intel_cpu() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


def matmul(a: np.ndarray, b: np.ndarray | PackedB, out: np.ndarray) -> None:
    """``out[...] = a @ b`` (numpy.matmul's meaning) by the library in force; ``b`` may be
    weights from :func:`packed`. Products oneMKL cannot take as laid out (see
    :func:`.mkl.sgemm`) run in numpy."""
    if library() == "mkl":
        from . import mkl

        if isinstance(b, PackedB):
            if mkl.sgemm_packed(a, b, out):
                return
        elif mkl.sgemm(a, b, out):
            return
    np.matmul(a, b.array if isinstance(b, PackedB) else b, out=out)


# Weights are packed for products of at most this many rows. MKL packs the right-hand matrix
# on every call; with few rows that is a large share of the product. Measured interleaved on
# the quiet host (2 cores, ResNet-50 b1, benchmarks/NOTES-cpu.md "oneMKL"), packed ÷ plain,
# two runs: the 49-row GEMM layers 0.70 / 0.72, 0.69 / 0.77 and 0.84 / 1.16; packing every
# layer, the 196-row ones 0.84-1.26 (mixed) and the larger ones 0.98-1.19 (no gain).
PACKED_MAX_ROWS = 128


def packed(b: np.ndarray, rows: int) -> np.ndarray | PackedB:
    """Weights ``b`` (k x n) for :func:`matmul`'s right-hand side: packed once by oneMKL
    where it multiplies and the products have at most PACKED_MAX_ROWS rows (``rows``), else
    ``b`` itself. Decided at prepare time, like the rest of a prepared kernel."""
    if library() != "mkl" or rows > PACKED_MAX_ROWS:
        return b
    from . import mkl

    return mkl.pack_b(b, rows) or b
