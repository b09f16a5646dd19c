"""oneMKL's single-precision GEMM for the numpy backend (the ``mkl`` extra), through ctypes.

numpy's wheels multiply with OpenBLAS. On the quiet host (Intel Xeon, 2 pinned cores) MKL's
GEMM ran ResNet-50's im2col matrices faster than OpenBLAS did (the 49 x 4609 x 512 product
of layer4's 3x3: 1.37-1.59 ms against 1.9-2.3; benchmarks/NOTES-cpu.md, "GEMM layers
against oneDNN"), and PyTorch's CPU convolutions, convsel's yardstick, run on that class of
GEMM. The ``mkl`` wheel (Intel's, on PyPI) ships the library but no Python binding, and
numpy has no way to call another BLAS, so this module calls ``cblas_sgemm`` and
``cblas_sgemm_batch_strided`` itself. Nothing is compiled: ctypes calls the library's C
entry points.

The library is looked for in ``CONVSEL_MKL_RT`` (a path to ``libmkl_rt.so``: a conda,
Debian or unpacked oneMKL), else among the ``mkl`` wheel's files. MKL ends the process
("FATAL ERROR: Cannot load ...") when a layer it needs is missing, so every file it will
load is checked before the first call, and MKL is only used when all are there.

MKL runs its threads on GNU OpenMP (libgomp: GCC's OpenMP, which PyTorch's Linux wheels load
too) rather than its default Intel OpenMP, so that one process does not hold two OpenMP
runtimes; without libgomp it runs single-threaded (MKL's sequential layer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
from dataclasses import dataclass
from functools import cache
from importlib import metadata

import numpy as np

from ... import config
from ...verdict import Verdict, failed, passed

FIELD = "mkl_rt"

# cblas.h and mkl_service.h constants
_ROW_MAJOR = 101
_NO_TRANS, _TRANS = 111, 112
_THREADING_SEQUENTIAL, _THREADING_GNU = 1, 3
_PACKED, _B_MATRIX = 151, 162
_CPU_LAYERS = ("avx512", "avx10", "avx2", "mc3", "def")


@dataclass(frozen=True)
class Library:
    """A loaded libmkl_rt: its entry points and what it says it is."""

    cdll: ctypes.CDLL
    path: str
    version: str
    threading: str


def _candidates() -> list[str]:
    """Paths of libmkl_rt to try, in order: the setting, the mkl wheel's, the loader's."""
    configured = getattr(config.current(), FIELD)
    if configured is not None:
        return [configured]
    found: list[str] = []
    try:
        files = metadata.files("mkl") or []
    except metadata.PackageNotFoundError:
        files = []
    found += sorted(str(f.locate()) for f in files if f.name.startswith("libmkl_rt.so"))
    system = ctypes.util.find_library("mkl_rt")
    if system is not None:
        found.append(system)
    return found


def _missing_layers(rt: str, threading: str) -> list[str]:
    """The MKL layers libmkl_rt will load that are not beside it (by the names it uses)."""
    if os.sep not in rt or not os.path.exists(rt):
        return []   # a bare soname from the loader (its layers are on the loader's path), or
        # no file at all (loading it fails cleanly)
    folder = os.path.dirname(os.path.abspath(rt))
    suffix = rt.rsplit(".so", 1)[1]   # ".3": the layers carry the same version
    def present(name: str) -> bool:
        return bool(glob.glob(os.path.join(folder, f"libmkl_{name}.so{suffix}*")))

    missing = [name for name in ("core", "intel_lp64", threading) if not present(name)]
    # MKL picks one code path for the CPU; which one cannot be asked before loading it
    if not any(present(name) for name in _CPU_LAYERS):
        missing.append("|".join(_CPU_LAYERS))
    return missing


def _has_libgomp() -> bool:
    try:
        ctypes.CDLL("libgomp.so.1")
    except OSError:
        return False
    return True


@cache
def library() -> Library | Verdict:
    """The loaded library, or a failed Verdict saying why there is none (cached: MKL is
    loaded once per process)."""
    candidates = _candidates()
    if not candidates:
        return failed("oneMKL not found: pip install 'convsel[mkl]', or set "
                      f"{config.variable(FIELD)} to a libmkl_rt.so")
    rt = candidates[0]
    gnu = _has_libgomp()
    threading = "gnu_thread" if gnu else "sequential"
    missing = _missing_layers(rt, threading)
    if missing:
        return failed(f"oneMKL at {rt} lacks libmkl_{', libmkl_'.join(missing)} "
                      "(MKL would stop the process when it loads them)")
    try:
        cdll = ctypes.CDLL(rt)
    except OSError as exc:
        return failed(f"oneMKL at {rt} does not load: {exc}")
    # before any other MKL call, or MKL picks its Intel OpenMP layer for good
    cdll.MKL_Set_Threading_Layer(_THREADING_GNU if gnu else _THREADING_SEQUENTIAL)
    _declare(cdll)
    text = ctypes.create_string_buffer(256)
    cdll.mkl_get_version_string(text, len(text))
    said = " ".join(text.value.decode(errors="replace").split())
    match = re.search(r"Version (\S+?)-Product Build (\d+)", said)
    version = f"oneMKL {match[1]} (build {match[2]})" if match else said
    return Library(cdll, rt, version, "GNU OpenMP" if gnu else "sequential")


def _declare(cdll: ctypes.CDLL) -> None:
    # every integer is MKL_INT: 32-bit in the LP64 interface libmkl_rt defaults to
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    cdll.cblas_sgemm.restype = None
    cdll.cblas_sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    cdll.cblas_sgemm_pack_get_size.restype = ctypes.c_size_t
    cdll.cblas_sgemm_pack_get_size.argtypes = [i, i, i, i]
    cdll.cblas_sgemm_pack.restype = None
    cdll.cblas_sgemm_pack.argtypes = [i, i, i, i, i, i, f, p, i, p]
    cdll.cblas_sgemm_compute.restype = None
    cdll.cblas_sgemm_compute.argtypes = [i, i, i, i, i, i, p, i, p, i, f, p, i]
    cdll.cblas_sgemm_batch_strided.restype = None
    cdll.cblas_sgemm_batch_strided.argtypes = [i, i, i, i, i, i, f, p, i, i, p, i, i,
                                               f, p, i, i, i]


def loaded() -> bool:
    """Whether oneMKL is loaded in this process (without loading it)."""
    return library.cache_info().currsize > 0 and isinstance(library(), Library)


def available() -> Verdict:
    """Whether oneMKL's GEMM can run here (loading it on first ask)."""
    found = library()
    if isinstance(found, Verdict):
        return found
    return passed(f"{found.version} ({found.threading})")


def _matrix(x: np.ndarray) -> tuple[int, int] | None:
    """How CBLAS reads the last two axes of float32 ``x`` in row-major order:
    (transpose flag, leading dimension), or None when neither axis has unit stride."""
    rows, cols = x.shape[-2:]
    s0, s1 = (s // 4 for s in x.strides[-2:])
    if x.strides[-1] == 4 or cols == 1:
        ld = s0 if rows > 1 else cols
        return (_NO_TRANS, ld) if ld >= max(1, cols) else None
    if x.strides[-2] == 4 or rows == 1:
        ld = s1 if cols > 1 else rows
        return (_TRANS, ld) if ld >= max(1, rows) else None
    return None


_INT_MAX = 2**31 - 1


def _fits(*arrays: np.ndarray) -> bool:
    """float32, aligned, non-empty, no negative stride, every offset within MKL_INT."""
    return all(a.dtype == np.float32 and a.flags.aligned and a.size > 0
               and min(a.strides, default=0) >= 0 and a.nbytes // 4 <= _INT_MAX
               and max(a.strides, default=0) // 4 <= _INT_MAX for a in arrays)


def sgemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = a @ b`` for float32 matrices, or 2-D by 3-D / 3-D by 3-D stacks of
    them with one batch size, by oneMKL. Returns False, having done nothing, where MKL is
    not loaded or the operands are not laid out as CBLAS reads them (the caller then runs
    numpy.matmul): a stride in neither of the last two axes, a dtype other than float32,
    an empty axis, an output overlapping an input, broadcasting other than one matrix
    against a stack."""
    lib = library()
    if isinstance(lib, Verdict) or not _fits(a, b, out):
        return False
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return False
    if out.ndim == 2 and a.ndim == 2 and b.ndim == 2:
        return _single(lib.cdll, a, b, out)
    if out.ndim == 3 and a.ndim in (2, 3) and b.ndim in (2, 3):
        return _batched(lib.cdll, a, b, out)
    return False


def _plan(a: np.ndarray, b: np.ndarray, out: np.ndarray,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int], tuple[int, int],
                     int] | None:
    """The operands as CBLAS takes them (a column-major output computed as its transpose,
    ``out.T = b.T @ a.T``), their (flag, ld) and the output's ld; None if they do not fit."""
    m, k = a.shape[-2:]
    if b.shape[-2] != k or out.shape[-2:] != (m, b.shape[-1]):
        return None
    if out.strides[-1] != 4 and out.shape[-1] > 1:
        if out.strides[-2] != 4 and out.shape[-2] > 1:
            return None
        a, b, out = b.swapaxes(-1, -2), a.swapaxes(-1, -2), out.swapaxes(-1, -2)
    ldc = out.strides[-2] // 4 if out.shape[-2] > 1 else out.shape[-1]
    ta, tb = _matrix(a), _matrix(b)
    if ta is None or tb is None or ldc < max(1, out.shape[-1]):
        return None
    return a, b, out, ta, tb, ldc


def _single(cdll: ctypes.CDLL, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    plan = _plan(a, b, out)
    if plan is None:
        return False
    a, b, out, (ta, lda), (tb, ldb), ldc = plan
    m, k = a.shape
    n = b.shape[1]
    cdll.cblas_sgemm(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a.ctypes.data, lda,
                     b.ctypes.data, ldb, 0.0, out.ctypes.data, ldc)
    return True


def _batched(cdll: ctypes.CDLL, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    batch = out.shape[0]
    if any(x.ndim == 3 and x.shape[0] != batch for x in (a, b)):
        return False
    if batch == 1:   # MKL wants a real output stride even for one product
        return _single(cdll, a[0] if a.ndim == 3 else a, b[0] if b.ndim == 3 else b, out[0])
    plan = _plan(a, b, out)
    if plan is None:
        return False
    a, b, out, (ta, lda), (tb, ldb), ldc = plan
    m, k = a.shape[-2:]
    n = b.shape[-1]
    # a stack the products would share rows of (MKL reports it and computes nothing)
    if out.strides[0] // 4 < ldc * m:
        return False

    def step(x: np.ndarray) -> int:   # a single matrix is used by every product
        return x.strides[0] // 4 if x.ndim == 3 else 0

    cdll.cblas_sgemm_batch_strided(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a.ctypes.data, lda,
                                   step(a), b.ctypes.data, ldb, step(b), 0.0,
                                   out.ctypes.data, ldc, step(out), batch)
    return True


@dataclass(frozen=True, eq=False)
class PackedB:
    """A right-hand matrix in oneMKL's packed storage (``cblas_sgemm_pack``), for products
    that reuse it: a layer's weights, packed once when the layer is prepared, so that each
    product skips the packing MKL otherwise does per call. ``array`` is the matrix itself, for
    numpy and for left operands the packed product cannot take. The storage costs memory
    beside the weights (about 1.7x their size on the shapes measured) and must not move:
    MKL's metadata in it depends on its address."""

    array: np.ndarray
    storage: np.ndarray
    address: int


def pack_b(b: np.ndarray, rows: int) -> PackedB | None:
    """``b`` (k x n, float32) packed for products with about ``rows`` rows on the left, or
    None where oneMKL is not loaded or ``b`` is not laid out as CBLAS reads it."""
    lib = library()
    if isinstance(lib, Verdict) or b.ndim != 2 or not _fits(b) or rows < 1:
        return None
    layout = _matrix(b)
    if layout is None:
        return None
    trans, ld = layout
    k, n = b.shape
    size = lib.cdll.cblas_sgemm_pack_get_size(_B_MATRIX, rows, n, k)
    storage = np.empty(size + 64, np.uint8)
    address = storage.ctypes.data + (-storage.ctypes.data) % 64
    lib.cdll.cblas_sgemm_pack(_ROW_MAJOR, _B_MATRIX, trans, rows, n, k, 1.0, b.ctypes.data, ld,
                              address)
    return PackedB(b, storage, address)


def sgemm_packed(a: np.ndarray, b: PackedB, out: np.ndarray) -> bool:
    """``out[...] = a @ b.array`` through the packed storage (``cblas_sgemm_compute``), for a
    2-D ``a`` CBLAS can read and a row-major ``out``; False, having done nothing, otherwise."""
    lib = library()
    if isinstance(lib, Verdict) or a.ndim != 2 or out.ndim != 2 or not _fits(a, out):
        return False
    k, n = b.array.shape
    m = a.shape[0]
    if a.shape[1] != k or out.shape != (m, n) or np.may_share_memory(out, a):
        return False
    if out.strides[1] != 4 and n > 1:
        return False
    layout = _matrix(a)
    ldc = out.strides[0] // 4 if m > 1 else n
    if layout is None or ldc < max(1, n):
        return False
    ta, lda = layout
    lib.cdll.cblas_sgemm_compute(_ROW_MAJOR, ta, _PACKED, m, n, k, a.ctypes.data, lda,
                                 b.address, n, 0.0, out.ctypes.data, ldc)
    return True
