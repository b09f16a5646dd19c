"""Fused loops for the numpy backend, compiled by numba (the ``cpu`` extra).

Each module here does in one pass over memory what the pure numpy code does in several:
:mod:`.depthwise` (every tap, the bias and the activation of a depthwise layer),
:mod:`.epilogue` (bias and activation after a GEMM). The algorithms in
:mod:`convsel.backends.numpy` call them when :func:`convsel.backends.numpy.accel.enabled`
says so at prepare time; importing this package imports numba.

How the loops are written, because numba vectorises only some forms (measured on AVX-512,
one thread: the same depthwise loop ran 0.47 ms or 3.1 ms by how it indexed):

- The innermost loop indexes one-dimensional contiguous slices with the loop variable of a
  ``range`` that starts at 0, or with unsigned offsets (``uintp``): a signed computed index
  gets numba's negative-index wraparound, which turns vector loads into gathers.
- Sizes the loops unroll over (kernel taps) are compile-time constants of a kernel built
  per size (a closure), so the tap loops unroll and the accumulator stays in a register.
- Fast-math allows contraction into FMAs and reassociation, never ``nnan``/``ninf``: NaN and
  Inf in the data must reach the output as they do in numpy.

Compiled code is cached on disk (numba's ``cache=True``), so a process pays each kernel's
compile time (about a second) once per machine and kernel size, not on every start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

from ..threads import numba_threads

FASTMATH = frozenset({"contract", "reassoc", "arcp", "nsz"})


def jit(parallel: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit`` with this package's settings (cached, fast-math without nnan/ninf,
    numpy's error model: no exception checks in the loops)."""
    return numba.njit(cache=True, fastmath=set(FASTMATH), parallel=parallel,  # type: ignore[no-any-return]
                      error_model="numpy", boundscheck=False)


def use_threads() -> None:
    """Launch the next parallel kernel with the backend's thread count (numba's setting is
    per calling thread, and capped at the pool size numba started with)."""
    n = max(1, min(numba_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
