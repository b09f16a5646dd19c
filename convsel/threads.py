"""The one rule for threads: they are a property of a *timing*, not of the device.

A timing records the threads its runs had (:func:`current`: BLAS's and OpenMP's, read through
threadpoolctl from the loaded libraries themselves, so what is recorded is what ran whatever
variable set it; the numpy backend's own pool for its fused kernels and FFT; the cores this
process may use), and the tuning database's device key names only the hardware and the
software (CPU model, numpy and its BLAS). :func:`limited` runs code under a given count
(``convsel tune --threads N``), through the numpy backend's
:func:`~convsel.backends.numpy.threads.limited_threads` (BLAS, fused kernels, FFT) and
threadpoolctl (OpenMP); a timing taken under other threads than the process now has is still
found, and the answer says so (:func:`differs`).

Without threadpoolctl installed the counts come from the usual environment variables, and
:func:`limited` cannot change them (it says so by returning the counts unchanged).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

# Config fields of the libraries' own thread variables, in the order each library reads them
_FIELDS = {"blas": ("openblas_num_threads", "mkl_num_threads", "omp_num_threads"),
           "openmp": ("omp_num_threads",)}


def cores() -> int:
    """The cores this process may run on (its CPU affinity, as ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        return os.cpu_count() or 1


def current() -> dict[str, int]:
    """``{"blas": n, "openmp": n, "pool": n, "cores": n}``: the threads the loaded BLAS and
    OpenMP libraries use now (the largest where several are loaded; 0 where none is), the
    numpy backend's own pool, and the cores this process may run on."""
    counts = _from_threadpoolctl()
    if counts is None:
        counts = {api: _from_environment(fields) for api, fields in _FIELDS.items()}
    return {**counts, "pool": _pool(), "cores": cores()}


def _pool() -> int:
    """The numpy backend's own threads (fused kernels, FFT workers)."""
    from .backends.numpy.threads import thread_count

    return thread_count()


# threadpoolctl's scan of the loaded libraries costs ~0.4 ms; reading the thread counts of
# libraries already found costs ~1 µs. The scan is redone when modules were imported since
# (loading a BLAS means importing the module that links it, or oneMKL's ctypes load).
_controller: tuple[tuple[int, bool], Any] | None = None


def _from_threadpoolctl() -> dict[str, int] | None:
    global _controller
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    # oneMKL is loaded through ctypes, not by an import: counted in the key by hand
    from .backends.numpy.mkl import loaded

    key = (len(sys.modules), loaded())
    if _controller is None or _controller[0] != key:
        _controller = (key, ThreadpoolController())
    found = {"blas": 0, "openmp": 0}
    for lib in _controller[1].lib_controllers:
        if lib.user_api in found:
            found[lib.user_api] = max(found[lib.user_api], int(lib.num_threads or 0))
    return found


def _from_environment(fields: tuple[str, ...]) -> int:
    from . import config  # the one reader of the environment

    settings = config.current()
    for name in fields:
        value = str(getattr(settings, name) or "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return cores()


@contextlib.contextmanager
def limited(threads: int | None) -> Iterator[dict[str, int]]:
    """Run the block with BLAS and OpenMP limited to ``threads`` (None: as they are); yields
    the counts in force inside the block."""
    if threads is None:
        yield current()
        return
    import scipy.linalg  # noqa: F401 - scipy's own BLAS, loaded now, so that it is limited too

    from .backends.numpy.threads import limited_threads

    with limited_threads(threads), _openmp_limited(threads):
        yield current()


@contextlib.contextmanager
def _openmp_limited(threads: int) -> Iterator[None]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads, user_api="openmp"):
        yield


def describe(counts: Mapping[str, Any]) -> str:
    """``"2 BLAS threads, 2 OpenMP threads on 2 cores"``."""
    pool = f", {counts['pool']} for fused kernels and FFT" if "pool" in counts else ""
    return (f"{counts.get('blas', '?')} BLAS thread(s), {counts.get('openmp', '?')} OpenMP "
            f"thread(s){pool} on {counts.get('cores', '?')} core(s)")


def differs(recorded: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str:
    """Why a timing taken with ``recorded`` threads may not hold under ``now`` ("" when the
    BLAS threads and cores are the same, or the timing recorded none)."""
    if not recorded:
        return ""
    changed = [k for k in ("blas", "pool", "cores")
               if k in recorded and recorded.get(k) != now.get(k)]
    if not changed:
        return ""
    return f"timed with {describe(recorded)}; this process has {describe(now)}"
