"""Run a named algorithm with given parameters on a backend: no choosing, no rules loaded.

This is the layer under both the user's front door (:mod:`convsel.api`: a policy chooses,
then this builds) and tuning (:mod:`convsel.tuning.measure`: every variant is built here and
timed). ``params`` arrive resolved (the Winograd tile, kernel tile sizes); :func:`resolve`
turns a caller's partial parameters into those through the algorithm registry.

:func:`build` runs on one backend (falling back to numpy); :func:`build_first` walks a list of
backends in order of preference, as ArmNN's ``Optimize`` does with ``backendPreferences``,
and says which were passed over and why.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import algorithms, backends
from .backends import Placement
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
          max_workspace_bytes: int | None = None,
          stacklevel: int = 3) -> tuple[Any, str, str | None]:
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
        if backends.implementation(algorithm, "numpy") is None:   # nothing to fall back to
            raise UnsupportedError(f"{backend} cannot run {algorithm}: {exc} (and numpy has "
                                   f"no {algorithm} to fall back to)", algorithm=algorithm,
                                   backend=backend) from exc
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
    try:
        kernel = build_on(p, algorithm, params, "numpy", w_ohwi, bias, None)
    except UnsupportedError as exc:   # the fallback cannot either: say both, warn of neither
        raise UnsupportedError(f"{why.removesuffix('; ran numpy instead')}; nor can the numpy "
                               f"fallback: {exc}", algorithm=algorithm, backend=backend) from exc
    warnings.warn(why, FallbackWarning, stacklevel=stacklevel)
    return kernel, "numpy", why


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


@dataclass(frozen=True)
class Built:
    """What :func:`build_first` prepared: the kernel, the backend that runs it, why that is not
    the first asked (None when it is), and each backend passed over with its reason."""

    kernel: Any
    backend: str
    fallback: str | None
    passed_over: tuple[str, ...]


def build_first(p: ConvProblem, algorithm: str, params: Mapping[str, Any],
                order: Sequence[Placement], w_ohwi: np.ndarray, bias: np.ndarray | None,
                device: Any = None, *, max_workspace_bytes: int | None = None) -> Built:
    """Prepare ``algorithm`` on the first backend of ``order`` that runs it (ArmNN: "layer not
    supported by backend X (reason), falling back to the next backend"), with a
    :class:`FallbackWarning` naming those passed over. ``device`` applies to entries that
    name no device index. One backend alone is :func:`build`: numpy covers its failures.

    Raises UnsupportedError naming every backend's reason when none runs it
    (:class:`~convsel.errors.WorkspaceLimitError` when the workspace limit refused them all).
    """
    if len(order) == 1:
        kernel, used, why = build(p, algorithm, params, order[0].backend, w_ohwi, bias,
                                  order[0].device_or(device),
                                  max_workspace_bytes=max_workspace_bytes, stacklevel=4)
        return Built(kernel, used, why, (why,) if why else ())
    passed: list[str] = []
    refused_by_limit = 0
    for entry in order:
        implemented = backends.implemented(algorithm, entry.backend)
        if not implemented.ok:   # said before any workspace limit, which has no estimate then
            passed.append(f"not supported by backend {entry}: {implemented.reason}")
            continue
        try:
            require_workspace(algorithm, p, params, entry.backend, max_workspace_bytes)
            kernel = build_on(p, algorithm, params, entry.backend, w_ohwi, bias,
                              entry.device_or(device))
        except WorkspaceLimitError as exc:
            refused_by_limit += 1
            passed.append(f"not run by backend {entry}: {exc}")
            continue
        except InvalidProblemError:
            raise
        except ConvselError as exc:   # unsupported here, or the device failed to build it
            passed.append(f"not supported by backend {entry}: {exc}")
            continue
        why = None
        if passed:
            why = f"{'; '.join(passed)}; ran {algorithms.label_of(algorithm, params)} on {entry}"
            warnings.warn(why, FallbackWarning, stacklevel=3)
        return Built(kernel, entry.backend, why, tuple(passed))
    listed = "; ".join(passed)
    message = (f"no backend of {', '.join(str(e) for e in order)} runs "
               f"{algorithms.label_of(algorithm, params)} for {p}: {listed}")
    if refused_by_limit == len(order) and max_workspace_bytes is not None:
        raise WorkspaceLimitError(message, limit=max_workspace_bytes, algorithm=algorithm)
    raise UnsupportedError(message, algorithm=algorithm)
