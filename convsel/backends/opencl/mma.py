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
from collections.abc import Callable

import numpy as np
import pyopencl as cl

from ...problem import ConvProblem
from ...verdict import Verdict, failed, passed
from ...winograd_transforms import winograd_matrices_2d
from .program import kernel_source
from .runtime import Runtime

MATH_MODES = ("tf32", "f16")
# a float64 convolution of NHWC x with OHWI w for a problem (no bias, no activation)
Convolve = Callable[[ConvProblem, np.ndarray, np.ndarray], np.ndarray]
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


def winograd_error_bound(tile: tuple[int, int], kernel: tuple[int, int], channels: int) -> float:
    """The largest ``|y - ref| / S`` an output of Winograd F(tile, kernel) with its batched
    GEMM on TF32 tensor cores may show against the exact (float64) convolution, S being the
    output's scale from :func:`winograd_scale` (the transforms applied to magnitudes).

    With n_y, n_x the input tile's sides, C = ``channels``, u = 2^-11, v = 2^-24:

        e_in  = (2 n_y + 2 n_x + 2) v        input transform in float32 (two passes of sums
                                             of n products, its constants rounded to float)
        e_out = (2 n_y + 2 n_x + 3) v        output transform in float32, then the bias
        g_acc = (6 ceil(C / 4) + 2) v        the tensor cores' accumulation (error_bound)
        bound = (1 + e_in)(1 + u)(1 + 2v)(1 + u)(1 + g_acc)(1 + e_out) - 1

    Each factor bounds how far one stage can move a value relative to the magnitudes S sums:
    the transformed input V (float32, then rounded to TF32), the filter U (float64 on the
    host, rounded to float32, then to TF32), their exact products summed over C in the
    tensor cores, the output transform. Every intermediate is bounded by its magnitude
    transform (|BT| |d| |BT|^T for V, |G| |g| |G|^T for U), so S bounds them all.
    """
    n_y, n_x = tile[0] + kernel[0] - 1, tile[1] + kernel[1] - 1
    e_in = (2 * n_y + 2 * n_x + 2) * TRUNCATION / 2
    e_out = (2 * n_y + 2 * n_x + 3) * TRUNCATION / 2
    g_acc = (6 * math.ceil(channels / 4) + 2) * TRUNCATION
    v = TRUNCATION / 2
    return ((1 + e_in) * (1 + U_TF32) * (1 + 2 * v) * (1 + U_TF32) * (1 + g_acc)
            * (1 + e_out) - 1)


def winograd_scale(p: ConvProblem, x_abs: np.ndarray, w_abs: np.ndarray, b_abs: np.ndarray,
                   tile: tuple[int, int], conv: Convolve) -> np.ndarray:
    """Per output of F(tile) on ``p`` (NHWC, float64): the magnitude the errors of
    :func:`winograd_error_bound` are relative to,

        S[o] = sum_ab |AT_y[i,a]| |AT_x[j,b]| sum_c V~[ab,c] U~[ab,c,k] + |bias_k|,
        V~ = |BT_y| |d| |BT_x|^T,   U~ = |G_y| |g| |G_x|^T

    for the output o at row i, column j of its tile (d: the tile's input window, g: the
    filter). For each (i, j) that is a convolution of |x| with an n_y x n_x filter at the
    tile's stride, which ``conv(problem, x, w)`` computes (float64; numpy's reference, or
    a GPU's)."""
    (at_y, g_y, bt_y), (at_x, g_x, bt_x) = (tuple(np.abs(m) for m in axis)
                                            for axis in winograd_matrices_2d(tile, (p.kh, p.kw)))
    u = np.einsum("au,kuvc,bv->abck", g_y, w_abs, g_x, optimize=True)        # |U| bound
    n_y, n_x = bt_y.shape[0], bt_x.shape[0]
    th, tw = -(-p.out_h // tile[0]), -(-p.out_w // tile[1])
    top, left = p.pad[0], p.pad[2]
    window = p.replace(kh=n_y, kw=n_x, stride=tile, activation=None,
                       pad=(top, (th - 1) * tile[0] + n_y - p.h - top,
                            left, (tw - 1) * tile[1] + n_x - p.w - left))
    out = np.empty((p.n, th * tile[0], tw * tile[1], p.k))
    for i in range(tile[0]):
        for j in range(tile[1]):
            # the filter seen by output (i, j) of a tile: OHWI over the input window
            f = np.einsum("a,b,al,bm,abck->klmc", at_y[i], at_x[j], bt_y, bt_x, u,
                          optimize=True)
            out[:, i::tile[0], j::tile[1], :] = conv(window, x_abs, f)
    return np.asarray(out[:, :p.out_h, :p.out_w, :] + b_abs)


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
