"""oneDNN's C API for the onednn backend (the ``onednn`` extra), through ctypes.

oneDNN is the library PyTorch, TensorFlow and ONNX Runtime run their CPU convolutions on:
its direct kernels are generated at run time for the CPU at hand (AVX2, AVX-512, AMX), and
PyTorch's convolutions are convsel's yardstick on the CPU (benchmarks/cpu.py). It ships no
Python binding on PyPI, so this module calls the few C entry points a forward convolution
needs (``dnnl.h`` of oneDNN 3.x). Nothing is compiled.

The library comes from Intel's ``onednn-cpu-gomp`` wheel (oneDNN 3.2, its last CPU-only wheel
on PyPI: the later ``onednn`` wheels are SYCL builds that need Intel's DPC++ runtime). It
threads with GNU OpenMP, the runtime that oneMKL's GNU layer (:mod:`convsel.backends.numpy.mkl`)
and PyTorch's Linux wheels load too, so one process keeps one OpenMP pool. ``CONVSEL_DNNL_LIB``
points at any other oneDNN 3.x CPU library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char_p,
    c_float,
    c_int,
    c_int64,
    c_size_t,
    c_uint,
    c_void_p,
)
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from ... import config
from ...errors import UnsupportedError
from ...verdict import Verdict, failed

FIELD = "dnnl_lib"
WHEEL = "onednn-cpu-gomp"

# dnnl_types.h / dnnl_common_types.h of oneDNN 3.x (stable within the major version)
SUCCESS, UNIMPLEMENTED = 0, 3
CPU_ENGINE = 1
IN_ORDER = 0x1
F32 = 3
FORMAT_ANY = 1
FORWARD_INFERENCE = 96
CONVOLUTION_DIRECT = 0x1
SCRATCHPAD_USER = 1
QUERY_IMPL_INFO = 8
QUERY_WEIGHTS_MD, QUERY_SCRATCHPAD_MD = 131, 136
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_SCRATCHPAD = 1, 17, 33, 41, 80
MEMORY_ALLOCATE = c_void_p(-1 & ((1 << (8 * ctypes.sizeof(c_void_p))) - 1))
MAX_DIMS = 12
_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented",
           4: "last implementation reached", 5: "runtime error", 6: "not required"}
_RUNTIMES = {0: "none", 1: "sequential", 2: "OpenMP", 4: "TBB", 8: "threadpool"}
_ISAS = {0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xF: "avx2_vnni", 0x1F: "avx2_vnni_2",
         0x27: "avx512_core", 0x67: "avx512_core_vnni", 0xE7: "avx512_core_bf16",
         0x1EF: "avx512_core_fp16", 0xFEF: "avx512_core_amx", 0x1FEF: "avx512_core_amx_fp16"}

Dims = c_int64 * MAX_DIMS


class ExecArg(Structure):
    _fields_ = [("arg", c_int), ("memory", c_void_p)]


class _Version(Structure):
    _fields_ = [("major", c_int), ("minor", c_int), ("patch", c_int), ("hash", c_char_p),
                ("cpu_runtime", c_uint), ("gpu_runtime", c_uint)]


# name -> (argument types, result type); every function not listed returns dnnl_status_t
_SIGNATURES: dict[str, tuple[list[object], object]] = {
    "dnnl_engine_create": ([POINTER(c_void_p), c_int, c_size_t], c_int),
    "dnnl_stream_create": ([POINTER(c_void_p), c_void_p, c_uint], c_int),
    "dnnl_stream_wait": ([c_void_p], c_int),
    "dnnl_stream_destroy": ([c_void_p], c_int),
    "dnnl_memory_desc_create_with_strides": (
        [POINTER(c_void_p), c_int, Dims, c_int, Dims], c_int),
    "dnnl_memory_desc_create_with_tag": ([POINTER(c_void_p), c_int, Dims, c_int, c_int], c_int),
    "dnnl_memory_desc_destroy": ([c_void_p], c_int),
    "dnnl_memory_desc_get_size": ([c_void_p], c_size_t),
    "dnnl_primitive_attr_create": ([POINTER(c_void_p)], c_int),
    "dnnl_primitive_attr_destroy": ([c_void_p], c_int),
    "dnnl_primitive_attr_set_scratchpad_mode": ([c_void_p, c_int], c_int),
    "dnnl_primitive_attr_set_post_ops": ([c_void_p, c_void_p], c_int),
    "dnnl_post_ops_create": ([POINTER(c_void_p)], c_int),
    "dnnl_post_ops_destroy": ([c_void_p], c_int),
    "dnnl_post_ops_append_eltwise": ([c_void_p, c_int, c_float, c_float], c_int),
    "dnnl_convolution_forward_primitive_desc_create": (
        [POINTER(c_void_p), c_void_p, c_int, c_int, c_void_p, c_void_p, c_void_p, c_void_p,
         Dims, Dims, Dims, Dims, c_void_p], c_int),
    "dnnl_reorder_primitive_desc_create": (
        [POINTER(c_void_p), c_void_p, c_void_p, c_void_p, c_void_p, c_void_p], c_int),
    "dnnl_primitive_desc_next_impl": ([c_void_p], c_int),
    "dnnl_primitive_desc_query": ([c_void_p, c_int, c_int, c_void_p], c_int),
    "dnnl_primitive_desc_query_md": ([c_void_p, c_int, c_int], c_void_p),
    "dnnl_primitive_desc_destroy": ([c_void_p], c_int),
    "dnnl_primitive_create": ([POINTER(c_void_p), c_void_p], c_int),
    "dnnl_primitive_execute": ([c_void_p, c_void_p, c_int, POINTER(ExecArg)], c_int),
    "dnnl_primitive_destroy": ([c_void_p], c_int),
    "dnnl_memory_create": ([POINTER(c_void_p), c_void_p, c_void_p, c_void_p], c_int),
    "dnnl_memory_set_data_handle": ([c_void_p, c_void_p], c_int),
    "dnnl_memory_get_memory_desc": ([c_void_p, POINTER(c_void_p)], c_int),
    "dnnl_memory_destroy": ([c_void_p], c_int),
    "dnnl_version": ([], POINTER(_Version)),
    "dnnl_get_effective_cpu_isa": ([], c_int),
}


class DnnlError(RuntimeError):
    """A oneDNN call failed for a reason other than a missing implementation."""


@dataclass(frozen=True)
class Library:
    """A loaded oneDNN: its entry points, what it says it is, and its CPU engine."""

    cdll: ctypes.CDLL
    path: str
    version: str
    runtime: str
    isa: str
    engine: c_void_p

    def call(self, name: str, *args: object) -> None:
        """Call ``name``; a status other than success raises (UnsupportedError for
        "unimplemented", :class:`DnnlError` otherwise)."""
        status = getattr(self.cdll, name)(*args)
        if status == SUCCESS:
            return
        reason = f"oneDNN's {name} failed: {_STATUS.get(status, f'status {status}')}"
        if status == UNIMPLEMENTED:
            raise UnsupportedError(reason, backend="onednn")
        raise DnnlError(reason)

    def new(self, name: str, *args: object) -> c_void_p:
        """Call a ``dnnl_*_create`` function and return the handle it made."""
        handle = c_void_p()
        self.call(name, byref(handle), *args)
        return handle

    def describe(self) -> str:
        return f"oneDNN {self.version} ({self.runtime}), ISA {self.isa}"


def _candidates() -> list[str]:
    """Paths of libdnnl to try, in order: the setting, the wheel's, the loader's."""
    configured = getattr(config.current(), FIELD)
    if configured is not None:
        return [configured]
    try:
        files = metadata.files(WHEEL) or []
    except metadata.PackageNotFoundError:
        files = []
    found = sorted(str(f.locate()) for f in files if f.name.startswith("libdnnl.so"))
    system = ctypes.util.find_library("dnnl")
    if system is not None:
        found.append(system)
    return found


def _bind(cdll: ctypes.CDLL) -> None:
    for name, (argtypes, restype) in _SIGNATURES.items():
        function = getattr(cdll, name)
        function.argtypes = argtypes
        function.restype = restype


@cache
def library() -> Library | Verdict:
    """The loaded library, or a failed Verdict saying why there is none (cached: loaded once
    per process)."""
    candidates = _candidates()
    if not candidates:
        return failed("oneDNN not found: pip install 'convsel[onednn]', or set "
                      f"{config.variable(FIELD)} to a libdnnl.so.3")
    path = candidates[0]
    try:
        cdll = ctypes.CDLL(path)
        _bind(cdll)
    except (OSError, AttributeError) as exc:
        return failed(f"oneDNN at {path} does not load as oneDNN 3.x: {exc}")
    v = cdll.dnnl_version().contents
    if v.major != 3:
        return failed(f"oneDNN at {path} is {v.major}.{v.minor}: convsel needs 3.x")
    engine = c_void_p()
    status = cdll.dnnl_engine_create(byref(engine), CPU_ENGINE, 0)
    if status != SUCCESS:
        return failed(f"oneDNN at {path} has no CPU engine (status {status})")
    isa = cdll.dnnl_get_effective_cpu_isa()
    return Library(cdll, path, f"{v.major}.{v.minor}.{v.patch}",
                   _RUNTIMES.get(v.cpu_runtime, f"runtime {v.cpu_runtime}"),
                   _ISAS.get(isa, hex(isa)), engine)


def loaded() -> Library:
    """The library; raises :class:`~convsel.errors.BackendUnavailableError` without it."""
    from ...errors import BackendUnavailableError

    lib = library()
    if isinstance(lib, Verdict):
        raise BackendUnavailableError(lib.reason, backend="onednn")
    return lib


@cache
def _openmp() -> ctypes.CDLL | None:
    """GNU OpenMP's runtime, the one the wheel's oneDNN threads with (None without it)."""
    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None


@contextmanager
def openmp_threads(n: int | None) -> Iterator[None]:
    """Run the block with OpenMP's thread count at ``n`` in this thread (the calling thread's
    setting is what a parallel region it starts uses), the previous count after; ``None``
    leaves it alone. oneDNN sizes a primitive's work split and scratchpad by the count when
    it is created, and parallel regions take it when they run, so both happen inside."""
    omp = _openmp() if n is not None else None
    if omp is None or omp.omp_get_max_threads() == n:
        yield
        return
    before = omp.omp_get_max_threads()
    omp.omp_set_num_threads(n)
    try:
        yield
    finally:
        omp.omp_set_num_threads(before)


def dims(values: Sequence[int]) -> ctypes.Array[c_int64]:
    """A ``dnnl_dims_t`` (12 int64) holding ``values`` first."""
    return Dims(*values)
