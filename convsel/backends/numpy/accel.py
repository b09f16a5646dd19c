"""Whether the numpy backend runs its fused kernels (the ``cpu`` extra: numba).

numpy runs a convolution's elementwise parts as separate passes over memory: a depthwise
3x3 layer is 17 of them, an im2col a padding pass then a copy. The ``cpu`` extra
(``pip install convsel[cpu]``) brings numba, which compiles loops that do such a part in one
pass; the kernels are in :mod:`convsel.backends.numpy.fused`. The pure numpy code stays
the reference: it is what runs without the extra, and what :func:`use_fused` (False)
switches back to. Every algorithm decides at prepare time, so a prepared kernel keeps the
path it was prepared with.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from functools import cache
from types import ModuleType

from ...verdict import Verdict, failed, passed

_wanted: bool = True


@cache
def available() -> Verdict:
    """Whether numba imports (importing it is the check; it takes about half a second)."""
    try:
        numba = importlib.import_module("numba")
    except ImportError as exc:
        return failed(f"the fused kernels need numba (pip install 'convsel[cpu]'): {exc}")
    return passed(f"numba {numba.__version__}")


def enabled() -> bool:
    """True when kernels prepared now take the fused paths: numba is installed and the
    fused kernels are not switched off."""
    return _wanted and available().ok


def use_fused(on: bool) -> None:
    """Switch the fused kernels on (the default, where numba is installed) or off (pure
    numpy) for kernels prepared from now on."""
    global _wanted
    _wanted = bool(on)


@contextlib.contextmanager
def fused(on: bool) -> Iterator[None]:
    """Kernels prepared inside the block take the fused paths (``on``) or pure numpy."""
    previous = _wanted
    use_fused(on)
    try:
        yield
    finally:
        use_fused(previous)


def kernels() -> ModuleType:
    """:mod:`convsel.backends.numpy.fused`, imported on first use (it imports numba)."""
    return importlib.import_module(f"{__package__}.fused")


def describe() -> str:
    """For the device key: which path kernels prepared now take."""
    if enabled():
        from . import bands

        # the opt-in banded path changes every GEMM layer's timing: part of the device key
        banded = "; GEMM layers in bands over convsel's threads" if bands.switched_on() else ""
        # the opt-in 512-bit vectors change every fused kernel's timing (process-wide)
        wide = ("; 512-bit vectors (numba -prefer-256-bit, process-wide)"
                if kernels().vectors.in_force() else "")
        return f"fused kernels: {available().reason}{banded}{wide}"
    return "pure numpy" + ("" if available().ok else " (numba not installed)")
