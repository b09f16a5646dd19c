"""What each backend and device supports, as ArmNN reports its backends' capabilities: the
answer of :func:`convsel.backends.capabilities` and ``convsel backends``.

Per backend: whether it can run here (and why not), the dtypes it runs, the algorithms it
implements, whether it keeps arrays on a device (``PreparedConv.run`` then takes and returns
``pyopencl.array.Array`` without touching the host). Per device: its name and index (the
``opencl:1`` of a backend list), how F16 runs on it (native half arithmetic with
``cl_khr_fp16``, else half storage with float32 arithmetic), fp64, tensor cores, and, when
asked, the measured cost of a host↔device copy.
"""

from __future__ import annotations

from typing import Any

from ..problem import ConvProblem
from .registry import BACKENDS, DEVICE_RESIDENT, IMPLEMENTATIONS, available

DTYPES = ("F32", "F16")   # what every backend runs; the quantized dtypes are selection-only
_F16 = ConvProblem(1, 1, 1, 1, 1, 1, 1, dtype="F16")


def capabilities(transfers: bool = False) -> list[dict[str, Any]]:
    """One JSON-ready entry per backend of :data:`convsel.backends.BACKENDS`, with its
    devices; ``transfers`` measures each device's host↔device copy cost too."""
    return [_backend(name, transfers) for name in BACKENDS]


def _backend(name: str, transfers: bool) -> dict[str, Any]:
    ready = available(name)
    devices = _DEVICES[name](transfers) if ready.ok else []
    return {"backend": name, "available": ready.ok, "reason": ready.reason,
            "dtypes": list(DTYPES), "device_resident": DEVICE_RESIDENT[name],
            "algorithms": sorted(a for (a, b) in IMPLEMENTATIONS if b == name),
            "devices": devices}


def _numpy_devices(transfers: bool) -> list[dict[str, Any]]:
    from .numpy import accel, device_identity, gemm

    # which library multiplies and whether the fused kernels run decide the CPU's speed
    return [{"index": None, "name": device_identity()["name"], "type": "CPU",
             "f16": "float32 arithmetic, F16 in and out", "fp16": False, "fp64": True,
             "tensor_cores": {"ok": False, "reason": "the host CPU through BLAS"},
             "gemm": gemm.describe(), "fused_kernels": accel.describe(), "transfer": None}]


def _opencl_devices(transfers: bool) -> list[dict[str, Any]]:
    from .opencl import device_info, get_runtime
    from .opencl.program import half_mode
    from .opencl.runtime import all_devices
    from .transfer import transfer_cost

    out = []
    for index, device in enumerate(all_devices()):
        info = device_info(device)
        entry: dict[str, Any] = {"index": index, "name": info["name"], "type": info["type"],
                                 "vendor": info["vendor"], "driver": info["driver"],
                                 "compute_units": info["compute_units"],
                                 "global_mem_bytes": info["global_mem_bytes"],
                                 "fp16": info["fp16"], "fp64": info["fp64"],
                                 "tensor_cores": None, "transfer": None}
        try:
            runtime = get_runtime(index)
            entry["tensor_cores"] = _tensor_cores(runtime)
            mode = half_mode(_F16, runtime)
            entry["f16"] = ("native half arithmetic (cl_khr_fp16)" if mode == "native" else
                            "half storage, float32 arithmetic (no cl_khr_fp16, or "
                            "CONVSEL_CL_HALF=storage)")
            if transfers:
                entry["transfer"] = transfer_cost("opencl", index).to_dict()
        except Exception as exc:  # noqa: BLE001 - a device that cannot be opened is reported
            entry["f16"] = None
            entry["error"] = f"cannot be opened: {exc}"
        out.append(entry)
    return out


def _tensor_cores(runtime: Any) -> dict[str, Any]:
    """Whether the implicit GEMM's TF32/F16 mma.sync variants run on the device: its
    capability, then a probe kernel built and run once per device (cached)."""
    from .opencl.mma import tensor_cores

    verdict = tensor_cores(runtime)
    return {"ok": verdict.ok, "reason": verdict.reason}


def _onednn_devices(transfers: bool) -> list[dict[str, Any]]:
    from .onednn import device_identity

    identity = device_identity()
    return [{"index": None, "name": identity["name"], "type": "CPU",
             "f16": "float32 arithmetic, F16 in and out", "fp16": False, "fp64": False,
             "tensor_cores": {"ok": False, "reason": "the host CPU through oneDNN"},
             "library": identity["driver"], "transfer": None}]


_DEVICES = {"numpy": _numpy_devices, "opencl": _opencl_devices, "onednn": _onednn_devices}
