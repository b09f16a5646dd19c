"""What moving a tensor between the host and a backend's memory costs.

numpy computes in host memory: nothing moves. A device-resident backend (OpenCL) pays a copy
each way when the layer before or after it runs elsewhere: a fixed latency plus the bytes
over the link's bandwidth. Both are measured here, once per device and process, by timing
blocking copies of a small and a large buffer each way (host→device and device→host, the
slower direction kept): the same copies :meth:`convsel.PreparedConv.run` makes for a numpy
input. Tuning times an OpenCL kernel on device-resident data (its profiling events), so the
copies are not in its timings and are added by whoever compares it with the host.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .registry import DEVICE_RESIDENT, backend_module


@dataclass(frozen=True)
class TransferCost:
    """``latency_s + nbytes / bytes_per_s`` for one copy between host and device; ``source``
    says where the figures come from."""

    latency_s: float
    bytes_per_s: float
    source: str

    def seconds(self, nbytes: int) -> float:
        """One copy of ``nbytes``; nothing to copy costs nothing."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bytes_per_s   # x / inf is 0.0: latency alone

    def to_dict(self) -> dict[str, Any]:
        return {"latency_ms": self.latency_s * 1e3,
                "gb_per_s": None if math.isinf(self.bytes_per_s) else self.bytes_per_s / 1e9,
                "source": self.source}


HOST = TransferCost(0.0, math.inf, "host memory: nothing moves")

# (backend, device identity) -> what the probe measured, once per process
_MEASURED: dict[tuple[str, tuple[tuple[str, str], ...]], TransferCost] = {}


def transfer_cost(backend: str, device: Any = None) -> TransferCost:
    """The cost of one host↔device copy on ``backend``/``device`` (measured on first use)."""
    if not DEVICE_RESIDENT[backend]:
        return HOST
    runtime = backend_module(backend).get_runtime(device)
    key = (backend, tuple(sorted(runtime.identity.items())))
    if key not in _MEASURED:
        _MEASURED[key] = _probe_opencl(runtime)
    return _MEASURED[key]


SMALL_BYTES = 4 << 10
LARGE_BYTES = 8 << 20


def _probe_opencl(runtime: Any) -> TransferCost:
    """Blocking copies of 4 KiB and 8 MiB each way, five of each after one to warm up: the
    small one's median is the latency, the difference of the two the bandwidth."""
    import pyopencl as cl

    host = np.zeros(LARGE_BYTES, np.uint8)
    buffer = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, LARGE_BYTES)

    def copy_s(nbytes: int, upload: bool) -> float:
        times = []
        for _ in range(6):
            start = time.perf_counter()
            if upload:
                cl.enqueue_copy(runtime.queue, buffer, host[:nbytes], is_blocking=True)
            else:
                cl.enqueue_copy(runtime.queue, host[:nbytes], buffer, is_blocking=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:])

    small = max(copy_s(SMALL_BYTES, True), copy_s(SMALL_BYTES, False))
    large = max(copy_s(LARGE_BYTES, True), copy_s(LARGE_BYTES, False))
    per_byte = max(large - small, 1e-12) / (LARGE_BYTES - SMALL_BYTES)
    return TransferCost(max(small - SMALL_BYTES * per_byte, 0.0), 1.0 / per_byte,
                        f"measured on {runtime.identity['name']}: blocking copies of 4 KiB "
                        "and 8 MiB each way")
