"""How many threads the numpy backend computes with: BLAS, the fused kernels, scipy.fft.

One number, set with :func:`set_threads` (or for a block, :func:`limited_threads`), governs
the three pools the backend uses: OpenBLAS's (through threadpoolctl, which changes the
loaded library's setting at run time, unlike the ``OPENBLAS_NUM_THREADS`` variable that is
read once when numpy is imported), the fused kernels' (the ``cpu`` extra: numba-compiled
loops that release the GIL, spread over Python threads) and scipy.fft's workers. Until it
is set, the count is the cores this process may run on (``sched_getaffinity``: a run
pinned with taskset to two of sixteen cores gets two), and BLAS keeps whatever its own
start-up settings gave it.

A timing depends on the thread count, so :func:`describe_threads` says what is in force
now, for the tuning database's device key and the service's /v1/backends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


_count: int = usable_cores()
_chosen: int | None = None   # what set_threads was given, if it was called


def thread_count() -> int:
    """The threads the backend's own pools (numba, scipy.fft) use now."""
    return _count


def chosen_threads() -> int | None:
    """The count :func:`set_threads` set, or None while the process runs on its defaults (a
    library with a pool of its own, oneDNN's OpenMP, then keeps its own start-up setting:
    ``OMP_NUM_THREADS``, else the cores)."""
    return _chosen


def set_threads(n: int) -> None:
    """Compute with ``n`` threads from now on: BLAS (needs threadpoolctl), the fused kernels
    (numba, when installed), scipy.fft, and the onednn backend's layers prepared from now on.

    Raises
    ------
    InvalidProblemError
        ``n`` is not a whole number of at least 1.
    """
    from ...errors import InvalidProblemError

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidProblemError("threads", n, "expected a whole number of threads >= 1")
    global _count, _chosen
    _count = _chosen = n
    controller = _blas_controller()
    if controller is not None:
        controller.limit(limits=n, user_api="blas")


@contextlib.contextmanager
def limited_threads(n: int) -> Iterator[None]:
    """``n`` threads inside the block (as :func:`set_threads`), the previous count after."""
    global _chosen
    previous, chosen, blas = _count, _chosen, _blas_threads()
    set_threads(n)
    try:
        yield
    finally:
        set_threads(previous)
        _chosen = chosen
        controller = _blas_controller()
        if controller is not None and blas is not None:
            controller.limit(limits=blas, user_api="blas")


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """BLAS computes with ``n`` threads inside the block (its previous count after), for
    code that runs several single-threaded GEMMs side by side in threads of its own
    (:mod:`~convsel.backends.numpy.bands`). A no-op without threadpoolctl. Unlike
    :func:`limited_threads` it leaves the fused kernels' count alone and reuses one
    threadpoolctl view of the libraries (building it costs milliseconds; switching the
    count is one call into each library)."""
    libraries = _loaded_blas()
    previous = [lib.num_threads for lib in libraries]
    for lib in libraries:
        lib.set_num_threads(n)
    try:
        yield
    finally:
        for lib, count in zip(libraries, previous, strict=True):
            lib.set_num_threads(count)


_blas_libraries: list[Any] | None = None


def _loaded_blas() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded when first asked (numpy's,
    and scipy's if imported by then), or [] without threadpoolctl."""
    global _blas_libraries
    if _blas_libraries is None:
        controller = _blas_controller()
        _blas_libraries = [] if controller is None else list(controller.lib_controllers)
    return _blas_libraries


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, or None without threadpoolctl."""
    from .gemm import library

    library()   # loads oneMKL now if it is to multiply, so that its threads are governed too
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController().select(user_api="blas")


def _blas_threads() -> int | None:
    """BLAS's thread count now (the first BLAS library loaded), None if unknown."""
    controller = _blas_controller()
    if controller is None or not controller.lib_controllers:
        return None
    return int(controller.lib_controllers[0].num_threads)


def describe_threads() -> str:
    """The thread settings in force, e.g. ``OPENBLAS_NUM_THREADS=2; BLAS 2 threads; 2
    threads for fused kernels and FFT``: the variables BLAS read at start-up (when set)
    and the counts now."""
    from ... import config

    settings = [f"{v}={value}" for v, value in config.current().blas_thread_variables().items()]
    blas = _blas_threads()
    if blas is not None:
        settings.append(f"BLAS {blas} threads")
    elif not settings:
        settings.append(f"default threads ({os.cpu_count()} CPUs)")
    settings.append(f"{_count} threads for fused kernels and FFT")
    return "; ".join(settings)
