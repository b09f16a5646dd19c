"""The onednn backend: oneDNN's direct convolutions on the CPU (the ``onednn`` extra).

A second CPU backend beside numpy, as ArmNN's CpuAcc (Arm Compute Library's kernels) sits
beside its CpuRef: it runs the direct method with the kernels PyTorch's, TensorFlow's and ONNX
Runtime's CPU convolutions run on, and the measured and predicted policies weigh it against
numpy's algorithms like any other backend. Host memory, as numpy: nothing moves between them.
Nothing here loads oneDNN until asked; a machine without it makes :func:`available` say so.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from ...verdict import Verdict
from . import library


def available() -> Verdict:
    """Whether oneDNN loads and has a CPU engine; never raises."""
    lib = library.library()
    if isinstance(lib, Verdict):
        return lib
    return Verdict(True, lib.describe())


def get_runtime(device: Any = None) -> None:
    """The CPU is oneDNN's one device here; ``device`` is accepted for symmetry and ignored."""


def device_identity(runtime: Any = None) -> dict[str, str]:
    """What decides this backend's speed, as the tuning database's device key: the CPU model
    and the oneDNN build with the instruction set its kernels are generated for. Threads are
    recorded per timing, as on numpy (:mod:`convsel.threads`)."""
    from ..numpy import cpu_model

    lib = library.library()
    driver = lib.reason if isinstance(lib, Verdict) else lib.describe()
    return {"backend": "onednn", "vendor": platform.machine(),
            "name": cpu_model() or platform.processor() or platform.machine(),
            "driver": driver}


def describe() -> dict[str, Any]:
    """JSON-ready state for the service's /v1/backends."""
    ready = available()
    lib = library.library()
    return {"backend": "onednn", "available": ready.ok, "reason": ready.reason,
            "devices": [device_identity()] if ready.ok else [],
            "counters": {"cpu_count": os.cpu_count() or 1},
            "library": None if isinstance(lib, Verdict) else lib.path}
