"""GEMM convolutions in bands of output rows, each band built, multiplied and finished by
one thread (the cpu extra's threaded path for im2col_gemm, gemm_1x1 and Winograd).

The other path splits only the GEMM: OpenBLAS spreads each product over its own threads,
while the operand (im2col, Winograd's input transform) and the epilogue run before and
after it in the calling thread, a whole layer's worth at a time: a 7.4 MB im2col matrix
for the ResNet-50 stem, written by one core and read back from memory by two. Here the
output rows are split between the backend's threads (:func:`~convsel.backends.numpy.
threads.thread_count`); each thread goes through its rows a chunk at a time (a chunk's
operand and output under ``CHUNK_BYTES``, so they stay in that core's L2): builds the
chunk's operand with the fused kernel, runs a single-threaded GEMM on it, applies bias and
activation. BLAS is held to one thread meanwhile (:func:`~convsel.backends.numpy.threads.
blas_threads`), so no BLAS worker competes with ours for the cores, and ours sleep on a
queue between layers instead of spinning.

Which path a kernel takes is decided when it is prepared (:func:`wanted`), from the
measurements in benchmarks/NOTES-cpu.md; :func:`forced` overrides that for tests and
benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ...problem import ConvProblem
from .profile import phase
from .threads import blas_threads, thread_count

# A chunk's operand and output together stay under this (the quiet host's cores have
# 2 MB of L2 each; the weights are read by every chunk and need room too).
CHUNK_BYTES = 512 * 1024

# Below this many multiply-adds per thread a layer keeps BLAS's own threads: handing a
# band to a pool thread costs tens of microseconds.
MIN_MACS_PER_THREAD = 2_000_000

_forced: bool | None = None


@contextlib.contextmanager
def forced(on: bool | None) -> Iterator[None]:
    """Kernels prepared inside the block take the banded path (True), BLAS's own threads
    (False) or what :func:`wanted` decides (None)."""
    global _forced
    previous, _forced = _forced, on
    try:
        yield
    finally:
        _forced = previous


def wanted(p: ConvProblem, macs: int, accelerated: bool) -> bool:
    """Whether a GEMM kernel for ``p`` with ``macs`` multiply-adds per run takes the banded
    path: only with the cpu extra and at least two threads, and where it measured faster."""
    threads = thread_count()
    if not accelerated or threads < 2:
        return False
    if _forced is not None:
        return _forced
    return macs // threads >= MIN_MACS_PER_THREAD


def chunk_units(unit_bytes: int) -> int:
    """Units (rows of output pixels or of tiles) per chunk: their operand and output
    (``unit_bytes`` per unit) under CHUNK_BYTES, at least one."""
    return max(1, CHUNK_BYTES // max(1, unit_bytes))


def run_bands(work: Callable[[int, int], None], units: int, chunk: int) -> None:
    """``work(start, stop)`` over the units [0, units) in chunks of at most ``chunk``,
    the units split between the backend's threads, BLAS single-threaded meanwhile."""
    from .fused import in_threads

    def band(start: int, stop: int) -> None:
        for first in range(start, stop, chunk):
            work(first, min(stop, first + chunk))

    with phase("bands"), blas_threads(1):
        in_threads(band, units, thread_count())


def per_image(start: int, stop: int, per: int) -> Iterator[tuple[int, int, int]]:
    """The units [start, stop) of images of ``per`` units each, as (image, first, count)
    runs that stay inside one image."""
    while start < stop:
        image, first = divmod(start, per)
        count = min(stop - start, per - first)
        yield image, first, count
        start += count
