"""One OpenCL device in use: its context, profiling queue, limits, programs and launches.

Device choice, first match wins: the ``device`` argument; ``$CONVSEL_OPENCL_DEVICE``;
pyopencl's standard ``$PYOPENCL_CTX``; the first GPU of any platform; the first device.
A device spec is a ``pyopencl.Device``, an int (index into every device of every platform),
or a string ``"P"`` / ``"P:D"`` (as ``PYOPENCL_CTX``: each part an index or a
case-insensitive name substring), or a bare name substring of a device.
"""

from __future__ import annotations

import math
import re
import threading
import warnings
from typing import Any

import numpy as np
import pyopencl as cl

from ... import config
from ...errors import (
    BackendUnavailableError,
    ConvselError,
    InvalidProblemError,
    KernelBuildError,
    UnsupportedError,
)
from .cache import RuntimeCache, capacity_from_env, program_key
from .tuner import CLTuner, default_tuner

DEVICE_ENV = config.variable("opencl_device")
STANDARD_ENV = config.variable("pyopencl_ctx")
INDEX_LIMIT = 2**31 - 1   # kernels index with 32-bit ints

_TYPE_NAMES = ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
               (cl.device_type.ACCELERATOR, "ACCELERATOR"))


class KernelLaunchError(ConvselError):
    """An OpenCL enqueue or transfer failed; the runtime has been given a fresh queue."""


def all_devices() -> list[cl.Device]:
    """Every device of every platform, in platform order; [] when there is no platform."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:          # PLATFORM_NOT_FOUND_KHR: an ICD loader without any driver
        return []
    devices: list[cl.Device] = []
    for platform in platforms:
        try:
            devices.extend(platform.get_devices())
        except cl.Error:      # DEVICE_NOT_FOUND on a platform without devices
            continue
    return devices


def device_type_name(device: cl.Device) -> str:
    return next((name for flag, name in _TYPE_NAMES if device.type & flag), "OTHER")


def _match(items: list[Any], part: str, what: str, spec: str) -> Any:
    part = part.strip()
    if part.isdigit():
        index = int(part)
        if index < len(items):
            return items[index]
        raise InvalidProblemError("device", spec, f"{what} index {index} is out of range "
                                  f"(there are {len(items)})")
    found = [item for item in items if part.lower() in item.name.lower()]
    if not found:
        names = ", ".join(repr(item.name) for item in items)
        raise InvalidProblemError("device", spec, f"no {what} name contains {part!r}; "
                                  f"known: {names}")
    return found[0]


def parse_device_spec(spec: Any) -> cl.Device:
    """The device a spec names (see the module docstring); raises InvalidProblemError."""
    if isinstance(spec, cl.Device):
        return spec
    devices = all_devices()
    if not devices:
        raise BackendUnavailableError("no OpenCL device: no platform with a device was found",
                                      backend="opencl")
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        indexed: cl.Device = _match(devices, str(int(spec)), "device", str(spec))
        return indexed
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidProblemError("device", spec, "expected a pyopencl.Device, an index or a "
                                  "'platform:device' string")
    if ":" in spec:
        platform_part, device_part = spec.split(":", 1)
        platform: Any = _match(cl.get_platforms(), platform_part, "platform", spec)
        device: cl.Device = _match(platform.get_devices(), device_part or "0", "device", spec)
        return device
    if spec.strip().isdigit():   # PYOPENCL_CTX="1": first device of platform 1
        chosen: cl.Device = _match(cl.get_platforms(), spec, "platform", spec).get_devices()[0]
        return chosen
    by_device = [d for d in devices if spec.strip().lower() in d.name.lower()]
    if by_device:
        return by_device[0]
    fallback: cl.Device = _match(cl.get_platforms(), spec, "platform", spec).get_devices()[0]
    return fallback


def choose_device(spec: Any = None) -> cl.Device:
    """The device to use for ``spec`` (None: environment, then first GPU, then first)."""
    settings = config.current()
    for candidate in (spec, settings.opencl_device, settings.pyopencl_ctx):
        if candidate is not None and candidate != "":
            return parse_device_spec(candidate)
    devices = all_devices()
    if not devices:
        raise BackendUnavailableError("no OpenCL device: no platform with a device was found",
                                      backend="opencl")
    gpus = [d for d in devices if d.type & cl.device_type.GPU]
    return (gpus or devices)[0]


def identity_of(device: cl.Device) -> dict[str, str]:
    """What identifies the device and its compiler: name, vendor, driver, platform version."""
    return {"backend": "opencl", "vendor": device.vendor.strip(), "name": device.name.strip(),
            "driver": device.driver_version.strip(),
            "platform": device.platform.version.strip()}


def device_tag(device: cl.Device) -> str:
    """ACL's tuner suffix in convsel's form: the device name, ``_MP`` and its compute units."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", device.name.strip()).strip("-")
    return f"{name}_MP{device.max_compute_units}"


class Runtime:
    """Context, profiling queue and limits of one device; programs built through the cache.

    The tuner is handed the runtime at each launch (the tuner never imports the runtime). A
    runtime given no tuner of its own follows the process-wide one, so ``tuner.configure``
    reaches runtimes that already exist.
    """

    def __init__(self, device: cl.Device, cache: RuntimeCache,
                 tuner: CLTuner | None = None) -> None:
        self.device = device
        self.context = cl.Context([device])
        self.queue = self._new_queue()
        self.identity = identity_of(device)
        self.tag = device_tag(device)
        self.cache = cache
        self._tuner = tuner
        self.max_alloc = int(device.max_mem_alloc_size)
        self.global_mem = int(device.global_mem_size)
        self.max_work_group = int(device.max_work_group_size)
        self.max_work_items = tuple(int(v) for v in device.max_work_item_sizes)
        self.fp16 = "cl_khr_fp16" in device.extensions.split()
        self.recoveries = 0
        self._lock = threading.Lock()

    @property
    def tuner(self) -> CLTuner:
        """The tuner handed to this runtime, else the process-wide one."""
        return self._tuner if self._tuner is not None else default_tuner()

    def _new_queue(self) -> cl.CommandQueue:
        # Profiling on: the tuner and the benchmark time kernels by their events.
        return cl.CommandQueue(self.context, self.device,
                               properties=cl.command_queue_properties.PROFILING_ENABLE)

    def __repr__(self) -> str:
        return f"<opencl Runtime {self.identity['name']!r} ({self.identity['driver']})>"

    # -- programs ---------------------------------------------------------------------
    def program(self, source: str, options: tuple[str, ...]) -> cl.Program:
        """The program for ``source`` built with ``options``, from the runtime cache."""
        key = program_key(self.identity, source, options)
        return self.cache.get_or_create(key, lambda: self._build(source, options))

    def _build(self, source: str, options: tuple[str, ...]) -> cl.Program:
        try:
            with warnings.catch_warnings():   # a non-empty log is a warning in pyopencl
                warnings.simplefilter("ignore", cl.CompilerWarning)
                built: cl.Program = cl.Program(self.context, source).build(
                    options=list(options))
                return built
        except cl.Error as exc:
            # pyopencl's message holds the device's build log (asking the program for it
            # afterwards would defeat pyopencl's binary cache and warn).
            raise KernelBuildError(f"OpenCL build failed on {self.identity['name']} with "
                                   f"options {' '.join(options)}", log=str(exc).strip(),
                                   options=options) from exc

    # -- memory -----------------------------------------------------------------------
    def check_buffers(self, sizes: dict[str, int], item_counts: dict[str, int]) -> str | None:
        """Why these buffers cannot live on the device (None if they can): each must fit
        CL_DEVICE_MAX_MEM_ALLOC_SIZE and 32-bit indexing, and all of them global memory."""
        for name, nbytes in sizes.items():
            if nbytes > self.max_alloc:
                return (f"buffer {name} needs {nbytes} bytes, more than the device's "
                        f"CL_DEVICE_MAX_MEM_ALLOC_SIZE of {self.max_alloc} bytes")
        for name, count in item_counts.items():
            if count > INDEX_LIMIT:
                return (f"buffer {name} holds {count} elements, more than the kernels' "
                        f"32-bit indexing allows ({INDEX_LIMIT})")
        total = sum(sizes.values())
        if total > self.global_mem:
            return (f"buffers need {total} bytes together, more than the device's "
                    f"CL_DEVICE_GLOBAL_MEM_SIZE of {self.global_mem} bytes")
        return None

    def buffer(self, nbytes: int, host: np.ndarray | None = None) -> cl.Buffer:
        """A device buffer of ``nbytes``, or holding a copy of ``host``; an allocation the
        driver refuses is an UnsupportedError (the fallback chain takes over)."""
        mf = cl.mem_flags
        try:
            if host is not None:
                return cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                 hostbuf=np.ascontiguousarray(host))
            return cl.Buffer(self.context, mf.READ_WRITE, size=max(int(nbytes), 1))
        except cl.Error as exc:
            size = host.nbytes if host is not None else nbytes
            raise UnsupportedError(f"{self.identity['name']} cannot allocate {size} bytes: "
                                   f"{exc}", backend="opencl") from exc

    # -- launches ---------------------------------------------------------------------
    def enqueue(self, kernel: cl.Kernel, gws: tuple[int, int, int],
                config_id: str | None) -> cl.Event:
        """Launch ``kernel`` over ``gws`` with the tuner's local size for ``config_id``.

        Kernels bound-check their ids, so the global size is rounded up to a multiple of
        the local size (OpenCL 1.2 needs that) when a local size is given.
        """
        lws = self.required_local_size(kernel)
        if lws is None and config_id:
            lws = self.tuner.local_size(self, kernel, gws, config_id)
        return self.launch(kernel, gws, lws)

    def required_local_size(self, kernel: cl.Kernel) -> tuple[int, int, int] | None:
        """The local size a kernel was compiled for (``reqd_work_group_size``: tiled kernels
        whose local-memory tiles assume it), or None when it leaves the choice open."""
        size = kernel.get_work_group_info(cl.kernel_work_group_info.COMPILE_WORK_GROUP_SIZE,
                                          self.device)
        fixed = tuple(int(v) for v in size)
        return fixed if any(fixed) else None  # type: ignore[return-value]

    def launch(self, kernel: cl.Kernel, gws: tuple[int, int, int],
               lws: tuple[int, int, int] | None) -> cl.Event:
        if lws is None:
            return cl.enqueue_nd_range_kernel(self.queue, kernel, gws, None)
        padded = tuple(math.ceil(g / size) * size for g, size in zip(gws, lws))
        return cl.enqueue_nd_range_kernel(self.queue, kernel, padded, lws)

    def kernel_max_work_group(self, kernel: cl.Kernel) -> int:
        return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                              self.device))

    def recover(self) -> None:
        """Replace the queue after a failed launch, so the next call starts clean."""
        with self._lock:
            old = self.queue
            try:
                old.finish()
            except cl.Error:
                pass          # the old queue may be in an error state: that is why we are here
            self.queue = self._new_queue()
            self.recoveries += 1


_RUNTIMES: dict[int, Runtime] = {}
_LOCK = threading.Lock()
_CACHE: RuntimeCache | None = None


def program_cache() -> RuntimeCache:
    """The process-wide program cache every runtime builds through."""
    global _CACHE
    with _LOCK:
        if _CACHE is None:
            _CACHE = RuntimeCache(capacity_from_env())
        return _CACHE


def get_runtime(device: Any = None) -> Runtime:
    """The (shared, created once) runtime of the device ``device`` names; it follows the
    process-wide tuner."""
    chosen = choose_device(device)
    cache = program_cache()
    with _LOCK:
        key = int(chosen.int_ptr)
        if key not in _RUNTIMES:
            _RUNTIMES[key] = Runtime(chosen, cache)
        return _RUNTIMES[key]


def runtimes() -> list[Runtime]:
    with _LOCK:
        return list(_RUNTIMES.values())
