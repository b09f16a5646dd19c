"""The numpy/scipy backend: every algorithm on the CPU, BLAS doing the heavy lifting."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from ...acl.verdict import Verdict


def available() -> Verdict:
    return Verdict(True, f"numpy {np.__version__}")


def get_runtime(device: Any = None) -> None:
    """numpy needs no runtime state; ``device`` is accepted for symmetry and ignored."""
    return None


def device_identity(runtime: Any = None) -> dict[str, str]:
    """What identifies the machine for tuning results: CPU, and numpy with its BLAS."""
    blas = "unknown BLAS"
    try:
        config = np.show_config(mode="dicts")  # type: ignore[call-arg]
        info = config.get("Build Dependencies", {}).get("blas", {})
        blas = f"{info.get('name', 'blas')} {info.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - show_config's shape varies across numpy versions
        pass
    return {"backend": "numpy", "vendor": platform.machine(),
            "name": platform.processor() or platform.machine(),
            "driver": f"numpy {np.__version__}, {blas}"}


def describe() -> dict[str, Any]:
    """JSON-ready state for the service's /v1/backends: availability, the one CPU "device",
    the algorithms this backend implements, and how many threads its BLAS and FFT use."""
    from .. import IMPLEMENTATIONS
    from .common import WORKERS

    ready = available()
    return {"backend": "numpy", "available": ready.ok, "reason": ready.reason,
            "devices": [device_identity()],
            "algorithms": sorted(a for (a, b) in IMPLEMENTATIONS if b == "numpy"),
            "counters": {"cpu_count": WORKERS, "fft_workers": WORKERS}}
