"""Backends and the one registry table of (algorithm, backend) implementations.

Each implementation module exposes:

    supports(problem, params, runtime) -> Verdict
        constraints of this backend beyond convsel.algorithms.supports (dtype, device limits);
        ``params`` are already resolved (the Winograd tile, kernel tile sizes)
    prepare(problem, weights_ohwi, bias, params, runtime) -> kernel
        binds the weights once (transforms them); ``kernel.run(x_nhwc) -> y_nhwc`` with bias
        and activation applied, and ``kernel.workspace_bytes`` the memory beyond x, w and y.

Each backend package exposes ``available() -> Verdict``, ``get_runtime(device=None)`` and
``device_identity(runtime) -> dict`` (vendor, name, driver). Modules are imported lazily, so
``import convsel`` works without pyopencl.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..algorithms.registry import REGISTRY
from ..verdict import Verdict, failed

BACKENDS: dict[str, str] = {
    "numpy": "convsel.backends.numpy",
    "opencl": "convsel.backends.opencl",
}

# (algorithm, backend) -> implementing module, from the algorithm registry.
IMPLEMENTATIONS: dict[tuple[str, str], str] = {
    (spec.id, backend): module for spec in REGISTRY for backend, module in spec.backends.items()}


def backend_module(backend: str) -> ModuleType:
    """The package of ``backend``, a name of :data:`BACKENDS` (the entry points check it:
    :func:`convsel.arguments.backend`)."""
    return importlib.import_module(BACKENDS[backend])


def implementation(algorithm: str, backend: str) -> ModuleType | None:
    """The module implementing ``algorithm`` on ``backend``, or None if there is none."""
    path = IMPLEMENTATIONS.get((algorithm, backend))
    return importlib.import_module(path) if path else None


def implemented(algorithm: str, backend: str) -> Verdict:
    if (algorithm, backend) in IMPLEMENTATIONS:
        return Verdict(True, f"{backend} implements {algorithm}")
    return failed(f"the {backend} backend has no {algorithm} implementation")


def backends_for(algorithm: str) -> list[str]:
    return [b for (a, b) in IMPLEMENTATIONS if a == algorithm]


def available(backend: str) -> Verdict:
    """Whether ``backend`` (a name of :data:`BACKENDS`) can run here; never raises for a
    missing optional package."""
    try:
        module = backend_module(backend)
    except ImportError as exc:
        return failed(f"{backend} backend cannot be imported: {exc}")
    result: Verdict = module.available()
    return result
