"""GEMM convolutions in bands of output rows, each band built, multiplied and finished by
one thread (the cpu extra's threaded path for im2col_gemm, gemm_1x1 and Winograd).

The other path splits only the GEMM: OpenBLAS spreads each product over its own threads,
while the operand (im2col, Winograd's input transform) and the epilogue run before and
after it in the calling thread, a whole layer's worth at a time: a 7.4 MB im2col matrix
for the ResNet-50 stem, written by one core and read back from memory by two. Here the
output rows are split between the backend's threads (:func:`~convsel.backends.numpy.
threads.thread_count`); each thread goes through its rows a chunk at a time (a chunk's
operand and output under ``CHUNK_BYTES``, written and read back while still in cache):
builds the chunk's operand with the fused kernel, runs a single-threaded GEMM on it,
applies bias and activation. BLAS is held to one thread meanwhile
(:func:`~convsel.backends.numpy.threads.blas_threads`), so no BLAS worker competes with
ours for the cores, and ours sleep on a queue between layers instead of spinning.

The banded path is opt-in (:func:`use_bands`), for every GEMM kernel of the process
alike, and decided when a kernel is prepared (:func:`wanted`); measured layer by layer it
wins on the stem and the Winograd layers and loses on most 1x1 layers, and mixing the two
paths in one network costs more than either (benchmarks/NOTES-cpu.md, "Bands").
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator

from .profile import phase
from .threads import blas_threads, thread_count

# A chunk's operand and output together stay under this. Two probes on the quiet host
# (2 pinned cores, 2 MB of L2 each) found no consistent winner among 512 KB, 2 MB and one
# chunk per thread (ResNet-50 stem: 4.1 ms with 512 KB chunks, 3.6 with one per thread;
# then 2.7 with 2 MB, 2.9 with 512 KB); each chunk costs a GEMM call and Python's
# bookkeeping, so fewer, larger ones are the default.
CHUNK_BYTES = 2 * 1024 * 1024

# Below this many multiply-adds per thread a kernel runs its bands in the calling thread
# alone: handing a band to a pool thread costs tens of microseconds.
MIN_MACS_PER_THREAD = 2_000_000

# With fewer output pixels than this, the threads split the output channels instead of
# the pixels: each then reads half the weights rather than all of them (ResNet-50's 7x7
# layers have 49 pixels and up to 4 MB of weights).
COLUMN_SPLIT_MAX_ROWS = 128

_on: bool = False


def use_bands(on: bool) -> None:
    """Kernels prepared from now on take the banded path (True, where the cpu extra is
    installed and at least two threads are set) or BLAS's own threads (False, the
    default)."""
    global _on
    _on = bool(on)


def switched_on() -> bool:
    """Whether :func:`use_bands` is on (kernels still need the cpu extra and two threads)."""
    return _on


@contextlib.contextmanager
def forced(on: bool) -> Iterator[None]:
    """Kernels prepared inside the block take the banded path (``on``) or not."""
    previous = _on
    use_bands(on)
    try:
        yield
    finally:
        use_bands(previous)


def wanted(accelerated: bool) -> bool:
    """Whether a GEMM kernel prepared now takes the banded path: switched on, with the cpu
    extra and at least two threads. Every GEMM kernel of a process decides alike on
    purpose: after a multi-threaded BLAS call OpenBLAS's workers spin on the cores for a
    while (~0.1 s), and a banded kernel right after one ran up to twice as slow (ResNet-50's
    layers back to back, each with its faster path, banded or not: 69 and 56 ms in two
    probes, against 46 and 43 ms with no bands at all; quiet host, benchmarks/NOTES-cpu.md,
    "Bands")."""
    return accelerated and _on and thread_count() >= 2


def threads_for(macs: int) -> int:
    """Threads for a kernel of ``macs`` multiply-adds: the backend's count, or 1 for small
    kernels (BLAS stays single-threaded either way, so no BLAS worker is woken)."""
    n = thread_count()
    return n if macs // n >= MIN_MACS_PER_THREAD else 1


def chunk_units(unit_bytes: int) -> int:
    """Units (rows of output pixels or of tiles) per chunk: their operand and output
    (``unit_bytes`` per unit) under CHUNK_BYTES, at least one."""
    return max(1, CHUNK_BYTES // max(1, unit_bytes))


def run_bands(work: Callable[[int, int], None], units: int, chunk: int, threads: int,
              ) -> None:
    """``work(start, stop)`` over the units [0, units) in chunks of at most ``chunk``
    units, ``threads`` threads taking the next chunk as they finish one (so a thread that
    shares its core with another process's does less of the work), BLAS single-threaded
    meanwhile."""
    from .fused import in_threads

    starts = list(range(0, units, chunk))
    taken = itertools.count()   # next() on it is atomic under the GIL

    def take(first: int, last: int) -> None:
        for i in iter(lambda: next(taken), None):
            if i >= len(starts):
                return
            work(starts[i], min(units, starts[i] + chunk))

    with phase("bands"), blas_threads(1):
        in_threads(take, threads, threads)


def run_columns(work: Callable[[int, int], None], columns: int, threads: int) -> None:
    """``work(first, last)`` over the output channels [0, columns) split into ``threads``
    blocks (multiples of 16 channels: whole vectors), BLAS single-threaded meanwhile."""
    from .fused import in_threads

    blocks = max(1, min(threads, columns // 16))
    edges = [min(columns, 16 * round(columns * i / blocks / 16)) for i in range(blocks + 1)]
    edges[-1] = columns

    def block(first: int, last: int) -> None:
        for b in range(first, last):
            if edges[b] < edges[b + 1]:
                work(edges[b], edges[b + 1])

    with phase("bands"), blas_threads(1):
        in_threads(block, blocks, blocks)


def per_image(start: int, stop: int, per: int) -> Iterator[tuple[int, int, int]]:
    """The units [start, stop) of images of ``per`` units each, as (image, first, count)
    runs that stay inside one image."""
    while start < stop:
        image, first = divmod(start, per)
        count = min(stop - start, per - first)
        yield image, first, count
        start += count
