"""Arrays of other libraries at the front door. Anything that exports DLPack or ``__array__``
(a PyTorch tensor, a JAX or CuPy array, ...) is read as a numpy array; the result goes back as
the caller's kind where that costs no copy (the input was read from host memory without one,
and its library has ``from_dlpack``), else it stays numpy. What was converted is said, as a
:class:`~convsel.errors.ConversionWarning`, as is a float64 input computed as float32 (ACL has
no F64 convolution; :func:`convsel.reference.conv2d_reference` computes in float64)."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConversionWarning, InvalidProblemError

# DLPack's producers fail in these ways for a tensor numpy cannot take (on a GPU, needing grad)
_DLPACK_REFUSALS = (BufferError, RuntimeError, TypeError, ValueError, AttributeError)
# where a library's from_dlpack lives, when not at the root of its arrays' module
_FROM_DLPACK = {"jax": "jax.numpy", "jaxlib": "jax.numpy"}


@dataclass(frozen=True)
class HostArray:
    """``value`` as a numpy array; ``note`` says what was converted (None: nothing was), and
    ``back`` turns a result into the caller's kind without a copy (None: it stays numpy)."""

    array: Any
    note: str | None = None
    back: Callable[[np.ndarray], Any] | None = None


def is_foreign(value: Any) -> bool:
    """An array of another library: not numpy, not pyopencl's (the OpenCL backend's own
    device arrays), and exporting DLPack or ``__array__``."""
    if isinstance(value, np.ndarray) or _library(value) == "pyopencl":
        return False
    return hasattr(value, "__dlpack__") or hasattr(value, "__array__")


def host_array(name: str, value: Any) -> HostArray:
    """``value`` (the argument ``name``) read as a numpy array when it is another library's;
    anything else is passed on unchanged, for the argument's own check to judge."""
    if not is_foreign(value):
        return HostArray(value)
    kind = f"{_library(value)}.{type(value).__qualname__}"
    array, how, shared = _read(name, value, kind)
    back = _writer(value) if shared else None
    return HostArray(array, f"{name} ({kind}) {how}", back)


def result(y: np.ndarray, x: HostArray) -> Any:
    """``y`` in x's kind where that is cheap (see :class:`HostArray`), else numpy."""
    if x.back is None:
        return y
    try:
        return x.back(y)
    except _DLPACK_REFUSALS:
        return y   # the caller's library would not take it; numpy is still the answer


def say(notes: list[str | None], y: Any = None) -> None:
    """One warning naming the arguments that were converted and what the result ``y`` is."""
    said = [n for n in notes if n]
    if not said:
        return
    if y is not None:
        said.append(f"the result is a {_library(y)}.{type(y).__qualname__}")
    warnings.warn("; ".join(said), ConversionWarning, stacklevel=3)


def say_dtype(x: Any, computed: Any) -> None:
    """Warn when the result's dtype differs from x's (float64 in, float32 out)."""
    given, used = np.dtype(x.dtype), np.dtype(computed)
    if given != used:
        warnings.warn(f"x is {given.name}: convsel computes in {used.name} (ACL has no "
                      f"{given.name} convolution) and returns {used.name}; "
                      "convsel.reference.conv2d_reference computes in float64",
                      ConversionWarning, stacklevel=4)


def _library(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def _read(name: str, value: Any, kind: str) -> tuple[np.ndarray, str, bool]:
    """(array, how it was read, whether it shares the caller's memory)."""
    refusals = []
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value), "read through DLPack without a copy", True
        except _DLPACK_REFUSALS as exc:
            refusals.append(f"DLPack: {exc}")
        try:   # on a device: the producer copies to the host, if it can
            copied = np.from_dlpack(value, device="cpu", copy=True)
            return copied, "copied to the host through DLPack", False
        except _DLPACK_REFUSALS as exc:
            refusals.append(f"DLPack to the host: {exc}")
    if hasattr(value, "__array__"):
        try:
            return np.asarray(value), "read through __array__", False
        except _DLPACK_REFUSALS as exc:
            refusals.append(f"__array__: {exc}")
    raise InvalidProblemError(name, kind, f"cannot be read as a host array ({'; '.join(refusals)})"
                              "; give it on the host (PyTorch: .detach().cpu(); CuPy: .get())")


def _writer(value: Any) -> Callable[[np.ndarray], Any] | None:
    library = _library(value)
    where = _FROM_DLPACK.get(library, library)
    module = sys.modules.get(where)
    if module is None and where != library and library in sys.modules:
        module = importlib.import_module(where)
    return getattr(module, "from_dlpack", None) if module is not None else None
