"""The backends and the one table of (algorithm, backend) implementations (re-exported by
:mod:`convsel.backends`; its modules import from here, so the package imports none of them
back).

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

A backend argument may name several backends in order of preference (ArmNN's
``backendPreferences``): :class:`Preference`, read by :func:`convsel.arguments.backends`;
:func:`supports_on` is ArmNN's ``IsLayerSupported`` with its reason, and :func:`capabilities`
its backend capabilities.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..algorithms.registry import REGISTRY
from ..verdict import Verdict, failed, passed

BACKENDS: dict[str, str] = {
    "numpy": "convsel.backends.numpy",
    "opencl": "convsel.backends.opencl",
    "onednn": "convsel.backends.onednn",
}

# Whether a backend keeps tensors in memory of its own (a device's), so that a tensor moves
# between it and the host when a neighbouring layer runs elsewhere; numpy computes in place.
DEVICE_RESIDENT: dict[str, bool] = {"numpy": False, "opencl": True, "onednn": False}


def on_host(backend: str) -> bool:
    """Whether ``backend`` computes on the host's cores, so that its timings depend on the
    process's threads (numpy, onednn), unlike a device's."""
    return not DEVICE_RESIDENT.get(backend, True)

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


@dataclass(frozen=True)
class Placement:
    """One entry of a backend argument: a backend of :data:`BACKENDS` and, when it names one
    (``"opencl:1"``), the index of its device among the backend's devices."""

    backend: str
    device: int | None = None

    def __str__(self) -> str:
        return self.backend if self.device is None else f"{self.backend}:{self.device}"

    def device_or(self, device: Any) -> Any:
        """The device to open: this entry's index, else ``device`` (given beside the backend
        argument; the front door refuses both at once)."""
        return self.device if self.device is not None else device

    @property
    def resident(self) -> bool:
        """Tensors live in the device's memory, not the host's."""
        return DEVICE_RESIDENT[self.backend]

    def space(self, device: Any = None) -> str:
        """The memory a tensor computed here lives in: "host", or this backend and device (a
        device given beside the argument applies where the entry names none)."""
        if not self.resident:
            return "host"
        chosen = self.device if self.device is not None else device
        return f"{self.backend}:{'default' if chosen is None else chosen}"


@dataclass(frozen=True)
class Preference:
    """Backends in the order to try them (ArmNN's backend preferences): a layer runs on the
    first that supports it, or, for the measured and predicted policies, on the fastest.
    ``auto`` when the caller said "auto" (every backend available here, in
    :data:`BACKENDS` order). Checked by :func:`convsel.arguments.backends`."""

    entries: tuple[Placement, ...]
    auto: bool = False

    def __iter__(self) -> Iterator[Placement]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __str__(self) -> str:
        return ",".join(str(e) for e in self.entries)

    @property
    def first(self) -> Placement:
        return self.entries[0]

    @property
    def single(self) -> bool:
        """One backend, as a plain name asks: it runs there or falls back to numpy."""
        return len(self.entries) == 1


def supports_on(algorithm: str, p: Any, params: Mapping[str, Any], backend: str,
                device: Any = None) -> Verdict:
    """ArmNN's ``IsLayerSupported`` with its reason: whether ``backend`` (on ``device``) runs
    ``algorithm`` with resolved ``params`` for ``p``, without building anything."""
    ready = available(backend)
    if not ready.ok:
        return ready
    module = implementation(algorithm, backend)
    if module is None:
        return implemented(algorithm, backend)
    try:
        runtime = backend_module(backend).get_runtime(device)
    except Exception as exc:  # noqa: BLE001 - a device that cannot be opened is a reason
        return failed(f"{backend} device {device!r} cannot be opened: {exc}")
    verdict: Verdict = module.supports(p, dict(params), runtime)
    return verdict if not verdict.ok else passed(f"{backend} runs {algorithm}")

