"""Where a numpy kernel's time goes: seconds per phase, collected only while switched on.

The algorithms wrap their steps in ``with phase("blas"):`` and the like; outside
:func:`profiling` that is a shared no-op context, so the steady-state cost is one global
read per step. ``benchmarks/cpu.py`` switches it on for a few extra runs per layer and
prints the split (BLAS against copies, padding, transforms, elementwise work, epilogue).
Phases are timed in the calling thread, by wall clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

# What each phase covers, in the order reports print them.
PHASES = {
    "pad": "zero-padded copy of the input (or its float32 copy)",
    "copy": "im2col / gather / subsample / scatter copies",
    "transform": "Winograd input and output transforms",
    "blas": "GEMMs in BLAS (bias fused where the algorithm can)",
    "elementwise": "vectorised multiply-adds outside BLAS (depthwise taps)",
    "fft": "forward and inverse FFTs",
    "fused": "one-pass compiled loops (numba, the cpu extra): taps, bias and activation",
    "epilogue": "bias, activation and dtype cast after the main loop",
    "bands": "bands of output rows in several threads: operand, GEMM, epilogue each",
    "library": "one call into a convolution library's kernel (the onednn backend's)",
}

_totals: dict[str, float] | None = None
_NOTHING = contextlib.nullcontext()


class _Timer:
    __slots__ = ("name", "start")

    def __init__(self, name: str) -> None:
        self.name = name
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        totals = _totals
        if totals is not None:
            spent = time.perf_counter() - self.start
            totals[self.name] = totals.get(self.name, 0.0) + spent


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """A context that adds its wall time to ``name`` while profiling is on."""
    return _Timer(name) if _totals is not None else _NOTHING


@contextlib.contextmanager
def profiling() -> Iterator[dict[str, float]]:
    """Collect seconds per phase (summed over every run inside the block) into the dict
    yielded; profiling is off again afterwards."""
    global _totals
    previous, _totals = _totals, {}
    try:
        yield _totals
    finally:
        _totals = previous
