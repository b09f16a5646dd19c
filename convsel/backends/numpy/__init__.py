"""The numpy/scipy backend: every algorithm on the CPU, BLAS doing the heavy lifting."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np

from ...verdict import Verdict
from . import accel, gemm
from .threads import thread_count


def available() -> Verdict:
    return Verdict(True, f"numpy {np.__version__}")


def get_runtime(device: Any = None) -> None:
    """numpy needs no runtime state; ``device`` is accepted for symmetry and ignored."""


def device_identity(runtime: Any = None) -> dict[str, str]:
    """What decides this backend's speed, as the tuning database's device key: the CPU model,
    numpy with its BLAS (and oneMKL where it runs the GEMMs: :mod:`.gemm`), and whether the
    fused kernels run (:mod:`.accel`). Threads are not part of it: each timing records the
    threads it ran with (:mod:`convsel.threads`; set them with
    :func:`.threads.set_threads`), and an answer from timings made with other threads says
    so."""
    # oneMKL named only where it multiplies: keys of timings taken before it existed stand
    by = f"; {gemm.describe()}" if gemm.library() == "mkl" else ""
    return {"backend": "numpy", "vendor": platform.machine(),
            "name": cpu_model() or platform.processor() or platform.machine(),
            "driver": f"numpy {np.__version__}, {_blas()}{by}; {accel.describe()}"}


def _blas() -> str:
    info = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return f"{info.get('name', 'unknown BLAS')} {info.get('version', '')}".strip()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where it says none): both CPU backends'
    device keys name it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def describe() -> dict[str, Any]:
    """JSON-ready state for the service's /v1/backends: availability, the one CPU "device",
    how many threads its FFT and fused kernels use (the cores this process may run on,
    unless set: :mod:`.threads`) and whether the fused kernels run. Which algorithms it
    implements is the backends table's to say (``convsel.backends.IMPLEMENTATIONS``; the
    service lists them beside this): the package never imports the table that imports it."""
    ready = available()
    return {"backend": "numpy", "available": ready.ok, "reason": ready.reason,
            "devices": [device_identity()],
            "counters": {"cpu_count": os.cpu_count() or 1, "fft_workers": thread_count()},
            "fused_kernels": accel.describe(), "gemm": gemm.describe()}
