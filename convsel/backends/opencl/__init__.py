"""The OpenCL backend: every algorithm as OpenCL C kernels, run through pyopencl.

Works on any OpenCL 1.2+ device: PoCL's CPU device on CI, a GPU's own driver elsewhere.
Nothing here is imported by ``import convsel``; a missing pyopencl or a machine without an
OpenCL device makes :func:`available` say so instead of raising.
"""

from __future__ import annotations

from typing import Any

from ...verdict import Verdict, failed


def available() -> Verdict:
    """Whether pyopencl imports and at least one OpenCL device exists; never raises."""
    try:
        import pyopencl  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken ICD loader
        return failed(f"pyopencl cannot be imported: {exc}")
    try:
        from .runtime import all_devices

        devices = all_devices()
    except Exception as exc:  # noqa: BLE001 - a driver that fails while being enumerated
        return failed(f"OpenCL devices cannot be listed: {exc}")
    if not devices:
        return failed("no OpenCL device: no platform with a device was found")
    names = ", ".join(d.name.strip() for d in devices)
    return Verdict(True, f"{len(devices)} OpenCL device(s): {names}")


def get_runtime(device: Any = None) -> Any:
    """The shared runtime (context, queue, limits) of the chosen device; see
    :mod:`convsel.backends.opencl.runtime` for how ``device`` is resolved."""
    from .runtime import get_runtime as _get

    return _get(device)


def device_identity(runtime: Any) -> dict[str, str]:
    """backend, vendor, name, driver (and platform version) of the runtime's device."""
    return dict(runtime.identity)


def device_info(device: Any) -> dict[str, Any]:
    """Key limits of one device, JSON-ready."""
    from .runtime import device_type_name

    return {
        "name": device.name.strip(), "type": device_type_name(device),
        "vendor": device.vendor.strip(), "version": device.version.strip(),
        "driver": device.driver_version.strip(),
        "compute_units": int(device.max_compute_units),
        "max_clock_mhz": int(device.max_clock_frequency),
        "global_mem_bytes": int(device.global_mem_size),
        "max_alloc_bytes": int(device.max_mem_alloc_size),
        "local_mem_bytes": int(device.local_mem_size),
        "max_work_group_size": int(device.max_work_group_size),
        "max_work_item_sizes": [int(v) for v in device.max_work_item_sizes],
        "fp16": "cl_khr_fp16" in device.extensions.split(),
        "fp64": "cl_khr_fp64" in device.extensions.split(),
    }


def describe() -> dict[str, Any]:
    """Availability, platforms and devices with their limits, the device a default runtime
    would use, program-cache counters and the tuner's state (for ``/v1/backends``)."""
    verdict = available()
    out: dict[str, Any] = {"backend": "opencl", "available": verdict.ok,
                           "reason": verdict.reason, "platforms": []}
    if not verdict.ok:
        return out
    import pyopencl as cl

    from ...errors import ConvselError
    from .runtime import choose_device, program_cache, runtimes
    from .tuner import default_tuner

    for platform in cl.get_platforms():
        try:
            devices = platform.get_devices()
        except cl.Error:
            devices = []
        out["platforms"].append({"name": platform.name.strip(),
                                 "vendor": platform.vendor.strip(),
                                 "version": platform.version.strip(),
                                 "devices": [device_info(d) for d in devices]})
    try:
        out["default_device"] = choose_device().name.strip()
    except Exception as exc:  # noqa: BLE001 - a bad CONVSEL_OPENCL_DEVICE is reported, not raised
        out["default_device"] = None
        out["device_error"] = str(exc)
    out["cache"] = program_cache().stats().to_dict()
    try:
        out["tuner"] = default_tuner().describe()
    except ConvselError as exc:    # a bad $CONVSEL_CL_TUNER is reported, not raised
        out["tuner"] = {"error": str(exc)}
    out["runtimes"] = [{"device": rt.identity["name"], "recoveries": rt.recoveries}
                       for rt in runtimes()]
    return out
