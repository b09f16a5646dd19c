"""Tensor cores from OpenCL on NVIDIA GPUs: whether a device has them, and what they cost in
accuracy.

NVIDIA's OpenCL compiler accepts inline PTX, so ``mma.sync`` reaches the tensor cores of a
device of compute capability 8.0 or newer (kernels/mma.cl). Whether a device can is not
guessed from its name: :func:`tensor_cores` builds a probe (kernels/mma_probe.cl) with both
instructions convsel uses, runs it on one warp and checks the product exactly, once per
device, and caches the answer. Every other device (PoCL, other vendors, older NVIDIA GPUs)
gets a reason instead, never a build error.

Math modes (a variant's ``math`` parameter): ``"tf32"`` multiplies F32 data in TF32 (10
fraction bits) and adds in float; it runs only for a problem whose ``fast_math`` is on (ACL's
and PyTorch's meaning: reduced accuracy allowed). ``"f16"`` multiplies F16 data as it is
(halves are exact in the product) and adds in float. See :func:`error_bound`.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pyopencl as cl

from ...verdict import Verdict, failed, passed
from .program import kernel_source
from .runtime import Runtime

MATH_MODES = ("tf32", "f16")
MIN_CAPABILITY = (8, 0)         # mma.sync with TF32 operands: sm_80
_NV_ATTRIBUTES = "cl_nv_device_attribute_query"

# Unit round-offs: 2^-(p) for a p-bit significand rounded to nearest.
U_TF32 = 2.0**-11               # TF32 and half: 10 fraction bits (+1 implicit)
U_F16 = 2.0**-11
TRUNCATION = 2.0**-23           # one float32 ulp (relative to 1): what a truncating add loses


def math_description(math_mode: str | None, dtype: str) -> str:
    """What a variant's arithmetic is, in words, for traces and reports."""
    if math_mode == "tf32":
        return "TF32 tensor cores (fast math), float accumulation"
    if math_mode == "f16":
        return "F16 tensor cores, float accumulation"
    return "float arithmetic" if dtype == "F32" else "F16 storage, float arithmetic"


def error_bound(math_mode: str, dtype: str, reduction: int, splits: int = 1) -> float:
    """The largest ``|y - ref| / (sum |x|*|w| + |bias|)`` an output of a tensor-core variant
    may show against the exact (float64) convolution of the same F32/F16 inputs.

    With R = ``reduction`` (KH*KW*C products per output), s = ``splits``:

        u_in  = 2^-11 for TF32 (each of x, w rounded to TF32), 0 for F16 (halves are exact)
        g_acc = (6 * ceil(R / 4) + s + 2) * 2^-23
        bound = (2 u_in + u_in^2) (1 + g_acc) + g_acc              F32 output
        bound = (1 + 2^-11) (that) + 2^-11                          F16 output (rounded)

    The product of two rounded inputs is exact in the tensor core; its error against x*w is
    at most (2 u_in + u_in^2)|x||w|. The accumulation term assumes, as measured on V100, T4
    and A100 (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
    PeerJ Comput. Sci. 7:e330, 2021), that a block FMA of at most 4 products and the
    accumulator aligns them to the largest exponent keeping a float32 significand and
    truncates: each of its <= 5 addends and the result then lose under one float32 ulp
    (2^-23) of the sum of magnitudes, (4 + 2) 2^-23 per block, ceil(R/4) blocks per output;
    split-K's partial sums and the bias add s + 2 float32 additions more. It is a worst-case
    bound (errors of random data are far smaller); an H100 exceeding it would fail the tests
    and show the assumption wrong.
    """
    if math_mode not in MATH_MODES:
        raise ValueError(f"unknown math mode {math_mode!r}; known: {', '.join(MATH_MODES)}")
    u_in = U_TF32 if math_mode == "tf32" else 0.0
    g_acc = (6 * math.ceil(reduction / 4) + splits + 2) * TRUNCATION
    bound = (2 * u_in + u_in * u_in) * (1 + g_acc) + g_acc
    return (1 + U_F16) * bound + U_F16 if dtype == "F16" else bound


# -- the capability probe ----------------------------------------------------------------------
_ANSWERS: dict[tuple[int, str], Verdict] = {}
_LOCK = threading.Lock()


def tensor_cores(runtime: Runtime) -> Verdict:
    """Whether ``runtime``'s device runs convsel's mma.sync kernels, with the reason; probed
    once per device (built, run and checked), then cached."""
    key = (int(runtime.device.int_ptr), runtime.identity["driver"])
    with _LOCK:
        known = _ANSWERS.get(key)
    if known is not None:
        return known
    answer = _probe(runtime)
    with _LOCK:
        _ANSWERS[key] = answer
    return answer


def device_capability(device: cl.Device) -> Verdict:
    """Whether the device is an NVIDIA GPU of compute capability >= 8.0, by its platform and
    cl_nv_device_attribute_query; the verdict's reason names what it found."""
    platform = device.platform.name.strip()
    if "NVIDIA" not in platform.upper():
        return failed(f"tensor cores are reached through NVIDIA's inline PTX, and "
                      f"{device.name.strip()!r} is on {platform!r}, not NVIDIA's OpenCL")
    if _NV_ATTRIBUTES not in device.extensions.split():
        return failed(f"{device.name.strip()!r} does not report {_NV_ATTRIBUTES}, so its "
                      "compute capability is unknown")
    major = int(device.compute_capability_major_nv)
    minor = int(device.compute_capability_minor_nv)
    if (major, minor) < MIN_CAPABILITY:
        return failed(f"{device.name.strip()!r} has compute capability {major}.{minor}; "
                      f"mma.sync with TF32 needs {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}")
    return passed(f"compute capability {major}.{minor}")


def probe_source() -> str:
    return "\n".join((kernel_source("mma"), kernel_source("mma_probe")))


def probe_operands(math_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A words 16x8, B words 8x8, the exact D 16x8) of small integers, so that every
    product and sum is exact in TF32/F16 and float and D can be compared exactly."""
    rng = np.random.default_rng(7)
    if math_mode == "tf32":
        a = rng.integers(-3, 4, (16, 8)).astype(np.float32)
        b = rng.integers(-3, 4, (8, 8)).astype(np.float32)
        return a.view(np.uint32), b.view(np.uint32), (a.astype(np.float64) @ b)
    # f16: each word holds two halves (lower bits: even k); D sums over all 16 k
    a16 = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    b16 = rng.integers(-3, 4, (16, 8)).astype(np.float16)
    a_words = a16.view(np.uint32)                                    # (16, 8)
    b_words = np.ascontiguousarray(b16.reshape(8, 2, 8).transpose(0, 2, 1)).view(np.uint32)
    return a_words, b_words.reshape(8, 8), a16.astype(np.float64) @ b16.astype(np.float64)


def run_probe(runtime: Runtime, math_mode: str, emulate: bool = False) -> np.ndarray:
    """Build and run the probe for one math mode; its D (16x8 float). Raises on failure."""
    options = [f"-DMATH_{math_mode.upper()}"] + (["-DMMA_EMULATE"] if emulate else [])
    program = runtime.program(probe_source(), tuple(options))
    a, b, _ = probe_operands(math_mode)
    mf = cl.mem_flags
    a_buf = cl.Buffer(runtime.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    b_buf = cl.Buffer(runtime.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    d = np.full((16, 8), np.nan, dtype=np.float32)
    d_buf = cl.Buffer(runtime.context, mf.WRITE_ONLY | mf.COPY_HOST_PTR, hostbuf=d)
    kernel = cl.Kernel(program, "mma_probe")
    kernel.set_args(a_buf, b_buf, d_buf)
    cl.enqueue_nd_range_kernel(runtime.queue, kernel, (32,), (32,))
    cl.enqueue_copy(runtime.queue, d, d_buf, is_blocking=True)
    return d


def _probe(runtime: Runtime) -> Verdict:
    capability = device_capability(runtime.device)
    if not capability.ok:
        return capability
    for math_mode in MATH_MODES:
        try:
            d = run_probe(runtime, math_mode)
        except Exception as exc:  # noqa: BLE001 - a build or launch failure is the answer
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return failed(f"{capability.reason}, but the {math_mode} mma.sync probe failed: "
                          f"{first}")
        expected = probe_operands(math_mode)[2]
        if not np.array_equal(d.astype(np.float64), expected):
            wrong = int(np.sum(d.astype(np.float64) != expected))
            return failed(f"{capability.reason}, but the {math_mode} mma.sync probe computed "
                          f"{wrong} of 128 products wrong (fragment layout not as expected)")
    return passed(f"mma.sync TF32 and F16 tensor cores ({capability.reason}; probe built, "
                  "run and checked)")
