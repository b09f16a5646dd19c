"""Run a named algorithm with given parameters on a backend: no choosing, no rules loaded.

This is the layer under both the user's front door (:mod:`convsel.api`: a policy chooses,
then this builds) and tuning (:mod:`convsel.tuning.measure`: every variant is built here and
timed). ``params`` arrive resolved (the Winograd tile, kernel tile sizes); :func:`resolve`
turns a caller's partial parameters into those through the algorithm registry.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import algorithms, backends
from .errors import (
    ConvselError,
    FallbackWarning,
    InvalidProblemError,
    UnsupportedError,
    WorkspaceLimitError,
)
from .problem import ConvProblem
from .rules import Rules
from .selection import require_workspace


def resolve(algorithm: str, p: ConvProblem, rules: Rules,
            params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full parameters of ``algorithm`` (a registry name: the caller checked it) on ``p``
    (defaults filled in from ``rules``).

    Raises UnsupportedError (with the reason) when the algorithm cannot run ``p`` with these
    parameters.
    """
    verdict = algorithms.supports(algorithm, p, rules, params)
    if not verdict.ok:
        raise UnsupportedError(f"{algorithm} cannot run {p}: {verdict.reason}",
                               algorithm=algorithm)
    return {**(params or {}), **verdict.params}


def build(p: ConvProblem, algorithm: str, params: Mapping[str, Any], backend: str,
          w_ohwi: np.ndarray, bias: np.ndarray | None, device: Any = None, *,
          max_workspace_bytes: int | None = None) -> tuple[Any, str, str | None]:
    """Prepare ``algorithm`` with ``params`` on ``backend``: ``(kernel, backend used, why)``.

    On a backend other than numpy, any capability gap or device failure falls back to numpy
    with a :class:`FallbackWarning`; ``why`` says what happened (None when nothing did).
    Nothing is built, on ``backend`` or on the fallback, whose workspace there exceeds
    ``max_workspace_bytes``: :class:`~convsel.errors.WorkspaceLimitError` instead.
    """
    require_workspace(algorithm, p, params, backend, max_workspace_bytes)
    try:
        return build_on(p, algorithm, params, backend, w_ohwi, bias, device), backend, None
    except UnsupportedError as exc:
        if backend == "numpy":
            raise
        why = f"{backend} cannot run {algorithm}: {exc}; ran numpy instead"
    except InvalidProblemError:
        raise
    except ConvselError as exc:   # KernelBuildError and the like: the device failed us
        if backend == "numpy":
            raise
        why = f"{backend} failed to prepare {algorithm}: {exc}; ran numpy instead"
    try:
        require_workspace(algorithm, p, params, "numpy", max_workspace_bytes)
    except WorkspaceLimitError as exc:
        raise WorkspaceLimitError(f"{why.removesuffix('; ran numpy instead')}; the numpy "
                                  f"fallback does not fit either: {exc}", limit=exc.limit,
                                  needed=exc.needed, algorithm=algorithm,
                                  backend="numpy") from None
    warnings.warn(why, FallbackWarning, stacklevel=3)
    return build_on(p, algorithm, params, "numpy", w_ohwi, bias, None), "numpy", why


def build_on(p: ConvProblem, algorithm: str, params: Mapping[str, Any], backend: str,
             w_ohwi: np.ndarray, bias: np.ndarray | None, device: Any = None) -> Any:
    """Prepare on exactly ``backend``; raises UnsupportedError instead of falling back."""
    ready = backends.available(backend)
    if not ready.ok:
        raise UnsupportedError(ready.reason, backend=backend)
    module = backends.implementation(algorithm, backend)
    if module is None:
        raise UnsupportedError(backends.implemented(algorithm, backend).reason,
                               algorithm=algorithm, backend=backend)
    runtime = backends.backend_module(backend).get_runtime(device)
    verdict = module.supports(p, params, runtime)
    if not verdict.ok:
        raise UnsupportedError(f"{backend} {algorithm}: {verdict.reason}",
                               algorithm=algorithm, backend=backend)
    return module.prepare(p, w_ohwi, bias, dict(params), runtime)
