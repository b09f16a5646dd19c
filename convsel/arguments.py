"""The front door's argument checks: one function per kind of argument.

Each public entry point (:func:`~convsel.select`, :func:`~convsel.choose`,
:func:`~convsel.prepare`, :func:`~convsel.conv2d`, :func:`~convsel.find`,
:func:`~convsel.plan`) passes every argument it is given through one of these, once, and hands
the layers under it values they trust: no inner function checks a backend name or a workspace
limit again. A bad value raises :class:`~convsel.errors.InvalidProblemError` naming the field,
the value and the rule; the text of each rule is written here and nowhere else
(``tests/test_front_door.py`` greps for copies).

Three kinds are judged where their facts live, each by one function too:

- the policy name and its options by :func:`convsel.policies.get_policy` (a policy's options
  are its class's fields; the policies sit above :mod:`convsel.selection`, which uses this
  module, so this module cannot import them), with each option's value checked here;
- the target by :func:`convsel.targets.resolve_target`;
- the device by the backend that opens it (the OpenCL runtime's ``parse_device_spec``), and the
  tuning database by :func:`convsel.tuning.db.open_db`.

This module imports nothing above :mod:`convsel.selection`. The one list of backend names is
:data:`convsel.backends.BACKENDS`, read only when a backend argument is checked, so that a
selection without one loads no backend code. Every backend argument is read by
:func:`backends` (one name, ``name:device-index``, a list in order of preference, or
"auto"); :func:`backend` is its one-name form, where a list has no meaning.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from . import algorithms
from .errors import InvalidProblemError, UnsupportedError
from .layouts import WEIGHTS_LAYOUTS, ohwi_shape, weights_to_ohwi
from .problem import ConvProblem

if TYPE_CHECKING:
    from .backends import Placement, Preference

# The numpy dtype each runnable problem dtype computes in (the others are selection-only).
NUMPY_DTYPES: dict[str, type[np.floating[Any]]] = {"F32": np.float32, "F16": np.float16}


def problem(value: Any) -> ConvProblem:
    """``value`` if it is a :class:`ConvProblem`."""
    if not isinstance(value, ConvProblem):
        raise InvalidProblemError("problem", type(value).__name__, "expected a ConvProblem")
    return value


def runnable(p: ConvProblem) -> ConvProblem:
    """``p`` if convsel can run it (F32 or F16); the quantized dtypes are selection-only, a
    capability gap rather than a wrong argument."""
    if p.dtype not in NUMPY_DTYPES:
        raise UnsupportedError(f"dtype {p.dtype} is selection-only: convsel runs "
                               f"{' and '.join(NUMPY_DTYPES)} convolutions")
    return p


def backends(value: Any) -> Preference:
    """A backend argument, read: THE one reading of every backend argument of the library.

    ``value`` is a backend name (``"numpy"``), a name with a device index (``"opencl:1"``),
    several in order of preference as a list (``["opencl", "numpy"]``) or a comma-separated
    string (``"opencl,numpy"``, the command line's and the service's spelling), ``"auto"``
    (every backend available here, in :data:`convsel.backends.BACKENDS` order), or a
    :class:`~convsel.backends.Preference` already read.
    """
    from .backends import BACKENDS, Placement, Preference, available

    if isinstance(value, Preference):
        return value
    if isinstance(value, str) and value.strip() == "auto":
        return Preference(tuple(Placement(n) for n in BACKENDS if available(n).ok), auto=True)
    items = value.split(",") if isinstance(value, str) else value
    if not (isinstance(items, (list, tuple)) and items and all(isinstance(i, str)
                                                                for i in items)):
        _unknown_backend(value)
    entries = tuple(_placement(str(i).strip(), value) for i in items)
    if len(set(entries)) != len(entries):
        raise InvalidProblemError("backend", value, "names a backend twice; list each "
                                  "backend (and device) once, in order of preference")
    return Preference(entries)


def _unknown_backend(value: Any) -> NoReturn:
    from .backends import BACKENDS

    raise InvalidProblemError("backend", value, f"unknown backend; known: {', '.join(BACKENDS)} "
                              "(a name, name:device-index, a list of them in order of "
                              "preference, or auto)")


def _placement(item: str, value: Any) -> Placement:
    from .backends import BACKENDS, Placement

    name, colon, index = item.partition(":")
    if name not in BACKENDS:
        _unknown_backend(value)
    if not colon:
        return Placement(name)
    if not index.isdecimal():   # isdigit() takes "²", which int() cannot read
        raise InvalidProblemError("backend", value, f"{item!r}: the device after ':' is an "
                                  "index, a whole number >= 0 (as `convsel backends` lists them)")
    return Placement(name, int(index))


def backend(value: Any) -> str:
    """One backend, by name, where a list has no meaning (what to tune or fit, whose
    workspace to estimate): :func:`backends` of exactly one name without a device index."""
    chosen = backends(value)
    if len(chosen) != 1 or chosen.first.device is not None:
        raise InvalidProblemError("backend", value, "takes one backend name here, its device "
                                  "as an argument of its own")
    return chosen.first.backend


def device_beside(chosen: Preference, device: Any) -> Any:
    """``device`` (checked by the backend that opens it), unless the backend argument already
    names a device index: one place says which device, not two."""
    indexed = [str(e) for e in chosen if e.device is not None]
    if indexed and device is not None:
        raise InvalidProblemError("device", device, f"the backend argument names the device "
                                  f"already ({', '.join(indexed)}); give it in one place")
    return device


def whole_number(field: str, value: Any, minimum: int, meaning: str = "") -> int:
    """An integer ``>= minimum`` (a bool is not one); ``meaning`` follows the rule in the
    error, e.g. ``"(bytes), or None for no limit"``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidProblemError(field, value, f"must be an integer >= {minimum}"
                                  + (f" {meaning}" if meaning else ""))
    return int(value)


def workspace_limit(value: Any) -> int | None:
    """``max_workspace_bytes``: None (no limit) or an integer number of bytes >= 0."""
    if value is None:
        return None
    return whole_number("max_workspace_bytes", value, 0, "(bytes), or None for no limit")


def seconds(field: str, value: Any) -> float | None:
    """A time budget (``budget_s``, ``tune_budget_s``): None (no limit) or a number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
        raise InvalidProblemError(field, value,
                                  "must be a number > 0 (seconds), or None for no limit")
    return float(value)


def tune(value: Any) -> bool:
    """``tune``: True or "auto" (time an unseen problem on first use), False, "off" or None
    (never time)."""
    if value is True or (isinstance(value, str) and value == "auto"):
        return True
    if value is None or value is False or (isinstance(value, str) and value == "off"):
        return False
    raise InvalidProblemError("tune", value, "expected True/\"auto\" (time an unseen problem "
                              "on first use) or False/\"off\"")


def top(value: Any) -> int | None:
    """``top``: None (time every candidate) or how many of the model's best-predicted
    candidates to time, an integer >= 1."""
    if value is None:
        return None
    return whole_number("top", value, 1, "(how many of the model's best-predicted "
                        "candidates to time)")


def algorithm(value: Any) -> str:
    """``algorithm``: "auto" (a policy chooses) or a name in the algorithm registry."""
    if not isinstance(value, str) or (value != "auto" and value not in algorithms.ALGORITHMS):
        raise InvalidProblemError("algorithm", value, "unknown algorithm; known: auto, "
                                  + ", ".join(algorithms.ALGORITHMS))
    return value


def algorithm_params(params: Any, tile: Any = None) -> dict[str, Any]:
    """A named algorithm's parameters as the caller gives them: ``params`` (a mapping) and
    ``tile``, short for ``params={"tile": tile}``. Their values are the algorithm's to judge
    (:func:`convsel.algorithms.supports`)."""
    if params is not None and not isinstance(params, Mapping):
        raise InvalidProblemError("params", params, "expected a mapping of parameter names "
                                  "to values, such as {\"tile\": (4, 4)}")
    asked = dict(params or {})
    if tile is not None:
        if isinstance(tile, (str, bytes)) or not hasattr(tile, "__iter__"):
            raise InvalidProblemError("tile", tile, "expected a (rows, cols) pair")
        asked["tile"] = tuple(tile)
    return asked


def weights_layout(value: Any) -> str:
    """The layout weights arrive in: one of :data:`convsel.layouts.WEIGHTS_LAYOUTS`."""
    if not isinstance(value, str) or value not in WEIGHTS_LAYOUTS:
        raise InvalidProblemError("weights_layout", value,
                                  f"unknown layout; known: {', '.join(WEIGHTS_LAYOUTS)}")
    return value


def float_array(name: str, value: Any, ndim: int) -> np.ndarray:
    """``value`` if it is a floating-point numpy array of ``ndim`` dimensions."""
    if not isinstance(value, np.ndarray) or value.ndim != ndim:
        raise InvalidProblemError(name, getattr(value, "shape", type(value).__name__),
                                  f"expected a {ndim}-D numpy array")
    if not np.issubdtype(value.dtype, np.floating):
        raise InvalidProblemError(name, str(value.dtype), "must be a floating-point array")
    return value


def weights(p: ConvProblem, w: Any, layout: str) -> np.ndarray:
    """``w`` (in ``layout``, already checked) as OHWI in ``p``'s dtype, if its shape is
    ``p``'s."""
    float_array("w", w, 4)
    if ohwi_shape(w.shape, layout) != p.weights_shape:
        raise InvalidProblemError("w", w.shape, f"{layout} weights for this problem must hold "
                                  f"K={p.k}, KH={p.kh}, KW={p.kw}, C/groups={p.c // p.groups}")
    return weights_to_ohwi(w, layout).astype(NUMPY_DTYPES[p.dtype], copy=False)


def bias(p: ConvProblem, value: Any) -> np.ndarray | None:
    """``value`` as K values in ``p``'s dtype, or None."""
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or value.shape != (p.k,):
        raise InvalidProblemError("bias", getattr(value, "shape", type(value).__name__),
                                  f"expected a 1-D array of K={p.k} values")
    float_array("bias", value, 1)
    return np.ascontiguousarray(value, dtype=NUMPY_DTYPES[p.dtype])


# The check of each argument that several entry points share, by the argument's name: the
# policies check their options through it, the CLI its flags.
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "backend": backend,
    "max_workspace_bytes": workspace_limit,
    "budget_s": lambda value: seconds("budget_s", value),
    "tune_budget_s": lambda value: seconds("tune_budget_s", value),
    "tune": tune,
    "top": top,
    "algorithm": algorithm,
    "weights_layout": weights_layout,
}


def check(name: str, value: Any) -> Any:
    """``value`` checked (and normalised) as the argument ``name``; a name without a check of
    its own is passed as given."""
    checker = BY_NAME.get(name)
    return value if checker is None else checker(value)
