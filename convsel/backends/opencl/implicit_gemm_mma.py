"""Implicit GEMM on NVIDIA tensor cores (kernels/implicit_gemm_mma.cl): the implicit_gemm
algorithm's variants with a ``math`` parameter, TF32 for F32 problems under fast math and F16
for F16 problems, both accumulating in float.

:mod:`.implicit_gemm` hands a variant here when its parameters name a math mode. The device
must pass :func:`.mma.tensor_cores` (built, run and checked once per device); anywhere else
the variant is unsupported with that reason. ``prepare(..., emulate=True)`` builds the same
kernel with its mma.sync replaced by a local-memory emulation of the same fragments (and
ldmatrix, cp.async by plain loads): tests use it to check the kernel's indexing on devices
without tensor cores; no policy reaches it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from ...algorithms.implicit_gemm import MMA_SLICES, MMA_TILES, mma_stage_bytes, mma_supports
from ...algorithms.shared import MAX_SPLITS
from ...errors import UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from . import program as prog
from .launch import Step, bind
from .mma import tensor_cores
from .prepared import (
    NUMPY_DTYPES,
    BufferPlan,
    OpenCLKernel,
    bias_buffer,
    bias_options,
    check_plan,
    io_plan,
    plan_verdict,
)
from .runtime import Runtime

MmaTile = tuple[int, int, int, int]
# Tests set this: on a device without tensor cores the variants then run their kernel with the
# mma emulated (the same fragments, through local memory; slow) instead of being refused, so
# the correctness suite checks the tensor-core kernel on every device. Never set in use.
EMULATE_WITHOUT_TENSOR_CORES = False
# Fragments from local memory by ldmatrix (one instruction for a whole A fragment or two B
# fragments, 16-byte swizzle) rather than by 64-bit loads of word pairs. A knob only for the
# ablation in benchmarks/gpu.py and for tests that check both layouts; always on in use.
LDMATRIX = True
# cp.async through L1 (.ca) rather than L2 only (.cg): a 3x3 layer's neighbouring taps, and
# the work-groups an SM runs side by side, read the same input rows, which .cg fetches from L2
# every time. A knob only for the ablation in benchmarks/gpu.py; always on in use.
CP_ASYNC_L1 = True
# The same for B (the weights) apart from A (None: as A): A's rows of a 1x1 layer are read
# once per work-group, so .ca only spends L1 fills (the same SRAM as local memory) on them,
# while B's slices are shared by every work-group of an SM with the same output channels.
# A knob for the ablation in benchmarks/gpu.py (v7).
CP_ASYNC_L1_B: bool | None = None
# TF32: the weights are rounded to TF32 (cvt.rna's rounding) once, on the host, when the
# kernel is prepared, so the kernel converts only the input's words. A knob for the ablation.
ROUND_WEIGHTS = True
# Fragments of the next k-step loaded before the current one is multiplied (FRAG2), and the
# mma as a non-volatile asm (MMA_FREE): knobs for the ablation, off in use: on the H100 both
# were within noise of the plain kernel (benchmarks/NOTES-gpu.md, v5).
FRAG2 = False
MMA_FREE = False
# The output tile through local memory, stored in 16-byte runs (STAGE_OUT), where it fits in
# the local memory the stages take; else (and for split-K partials) from the fragments.
STAGE_OUT = True
# Specialised builds (SPECIALISE): a 1x1 kernel without padding checks only rows past M, not
# each unit's pixel (NO_BOUNDS), and C a multiple of a slice's channels drops the channel check
# (C_WHOLE): fewer integer instructions per copy beside the mma. A knob for the ablation.
SPECIALISE = True
# cp.async: the k-step of the current slice after which the next slice's copies are issued
# (0: before the first, as in v5). Right after the barrier all warps compute copy addresses
# at once while the tensor cores idle; issuing after a k-step of mma overlaps the two.
# A knob for the ablation (clamped to the slice's last k-step).
ISSUE_AT = 0
# A slice's k-steps as a loop (ROLL_K) rather than unrolled: ptxas then cannot hoist later
# k-steps' fragment loads, so a work-item holds fewer registers and more work-groups fit an SM
# (-cl-nv-maxrregcount is ignored by NVIDIA's OpenCL, v4). A knob for the ablation.
ROLL_KSTEPS = False
# cp.async with pixel bounds (not NO_BOUNDS): each A row's bounds check done once per tap and
# kept as a bit (TAP_MASK) instead of on every slice's copies (a tap of C channels takes
# C / slice channels slices). A knob for the ablation (v7).
TAP_MASK = False
# The stem (a flat reduction of few channels, the RGB 7x7 conv1) with its input padded to
# PAD_STEM channels (4 or 8; TF32 always 4) by a pad step (pad_channels) and its weights with
# zero channels on the host, so that each load unit is one tap's whole pixel (an 8- or 16-byte
# load, or cp.async) instead of word-by-word element gathers; 0: not padded. On the H100
# (benchmarks/NOTES-gpu.md, v8; ResNet-50 conv1 b32, the pad step's time included) 4 made the
# fastest TF32 variant 1.57x and the fastest F16 one 1.32x faster; 8 (F16) less so.
PAD_STEM = 4
# The work-groups' order (GROUP_M block rows per block column, so that neighbouring
# work-groups share operand tiles in L2), or None for the launch's own order. A knob for the
# ablation: on the H100 (v8) 8 and 32 lost 1-6% with 128x64x2x2 and won ~4% only with
# 128x128x2x2 in TF32 (every ResNet-50 b32 operand fits the L2 anyway).
GROUP_M: int | None = None
# Diagnosis only, never in use (benchmarks/gpu.py --diagnose; the results are wrong by
# design): "no_loads" builds the kernel without its cp.async copies, "no_mma" without its
# mma.sync, to see which part bounds a layer's time.
DIAGNOSE: str | None = None
# ptxas's register cap per work-item (-cl-nv-maxrregcount=N), or None for the compiler's own
# choice. A knob only for the ablation in benchmarks/gpu.py (fewer registers, more work-groups
# per SM, against spills); never set in use.
MAX_REGISTERS: int | None = None
# The packed 16-bit input row/column of each staged row (kernels/implicit_gemm_mma.cl: a_yx)
# and its past-M marker -2^14 need maps, padding and kernel extents below 2^14.
MAX_EXTENT = 1 << 14
ALGORITHM = "implicit_gemm"
# Local memory per work-group beyond what the device reports, tried largest first on a device
# with tensor cores (NVIDIA: 48 KiB reported, static arrays of up to 200 KiB built and ran on
# the H100; an A100 allows 163 KiB per block in CUDA), each built, run and checked.
LARGE_LOCAL_KIB = (192, 160, 128, 96, 64)
THREADS_PROBE = 256
_LOCAL_LIMITS: dict[tuple[int, str], int] = {}
_LOCAL_LOCK = threading.Lock()


@dataclass(frozen=True)
class MmaConfig:
    """Everything that shapes one tensor-core launch."""

    math: str
    tile: MmaTile
    slice_words: int          # SW: words of the reduction staged at a time
    load: str                 # "async" (cp.async) or "registers"
    stages: int
    unit_words: int           # 4: 16-byte loads; 1: one word (any channel count)
    flat: bool                # the whole reduction as one tap (few channels: the stem)
    splits: int
    slices: int               # of the whole reduction (all splits)
    warps_k: int = 1          # warps sharing each warp tile (sliced K)
    channels: int = 0         # C as the kernel reads it: the padded stem's, else the problem's

    @property
    def threads(self) -> int:
        return 32 * self.tile[2] * self.tile[3] * self.warps_k

    @property
    def local_bytes(self) -> int:
        """The stages, or (sliced K) the partial sums of all but one warp per warp tile."""
        sums = (self.warps_k - 1) * self.tile[0] * self.tile[1] * 4
        return max(self.stages * mma_stage_bytes(self.tile, self.slice_words), sums)

    @property
    def partial_sums(self) -> int:
        """Partial sums each output adds up at the end (split-K times sliced K): the error
        bound's count of them."""
        return self.splits * self.warps_k


def local_memory_limit(runtime: Runtime) -> int:
    """Bytes of local memory one work-group of this kernel may declare: the device's
    CL_DEVICE_LOCAL_MEM_SIZE, or on a device with tensor cores the largest of
    :data:`LARGE_LOCAL_KIB` that a static ``__local`` array was built, run and read back
    correctly with (kernels/local_memory_probe.cl), probed once per device. NVIDIA's OpenCL
    reports 48 KiB, as CUDA's default without its opt-in, yet builds larger static arrays."""
    reported = int(runtime.device.local_mem_size)
    key = (int(runtime.device.int_ptr), runtime.identity["driver"])
    with _LOCAL_LOCK:
        known = _LOCAL_LIMITS.get(key)
    if known is not None:
        return known
    limit = reported
    if tensor_cores(runtime).ok:
        for kib in LARGE_LOCAL_KIB:
            if kib * 1024 > reported and _static_local_runs(runtime, kib * 1024):
                limit = kib * 1024
                break
    with _LOCAL_LOCK:
        _LOCAL_LIMITS[key] = limit
    return limit


def _static_local_runs(runtime: Runtime, size: int) -> bool:
    words = size // 4
    try:
        program = runtime.program(prog.kernel_source("local_memory_probe"),
                                  (f"-DLOCAL_BYTES={size}",))
        out = cl.Buffer(runtime.context, cl.mem_flags.WRITE_ONLY, THREADS_PROBE * 4)
        kernel = cl.Kernel(program, "local_memory_probe")
        kernel.set_args(out)
        cl.enqueue_nd_range_kernel(runtime.queue, kernel, (THREADS_PROBE,),
                                   (THREADS_PROBE,))
        got = np.empty(THREADS_PROBE, np.uint32)
        cl.enqueue_copy(runtime.queue, got, out, is_blocking=True)
    except Exception:  # noqa: BLE001 - a build or launch failure is the answer: not allowed
        return False
    read = [np.arange(t, words, THREADS_PROBE, dtype=np.uint64) for t in range(THREADS_PROBE)]
    want = np.array([np.sum((words - 1 - r) * 3 + 1) % (1 << 32) for r in read], np.uint32)
    return bool(np.array_equal(got, want))


def elements_per_word(math_mode: str) -> int:
    return 2 if math_mode == "f16" else 1


def default_tile(runtime: Runtime, m: int, n: int) -> MmaTile:
    """The biggest declared tile that still makes about two work-groups per compute unit."""
    want = 2 * int(runtime.device.max_compute_units)
    for tile in MMA_TILES:
        if -(-m // tile[0]) * -(-n // tile[1]) >= want:
            return tile
    return MMA_TILES[-1]


def default_splits(runtime: Runtime, m: int, n: int, tile: MmaTile, slices: int) -> int:
    """Split-K on a GPU when the tiles alone leave compute units idle: about two work-groups
    per unit, each split keeping at least 8 slices; 1 elsewhere."""
    if not runtime.device.type & cl.device_type.GPU:
        return 1
    groups = -(-m // tile[0]) * -(-n // tile[1])
    want = 2 * int(runtime.device.max_compute_units)
    return max(1, min(want // groups, slices // 8, MAX_SPLITS))


def flat_reduction(p: ConvProblem) -> bool:
    """Few channels (the RGB stem): one tap of C elements would fill a slice of 16-64 with
    zeros, so the kernel runs the whole KH*KW*C reduction as one tap, padded once at its end."""
    return p.kh * p.kw > 1 and p.c < 8


def stem_channels(p: ConvProblem, math_mode: str) -> int:
    """The channels the kernel reads: for a flat reduction (:func:`flat_reduction`, C < 8)
    padded up to one whole load unit per pixel when :data:`PAD_STEM` asks (TF32: 4 floats,
    16 bytes, where C <= 4; F16: PAD_STEM halves, or 8 where C is more: 8 or 16 bytes);
    else the problem's own."""
    if not flat_reduction(p) or not PAD_STEM:
        return p.c
    if math_mode == "tf32":
        return 4 if p.c <= 4 else p.c
    return PAD_STEM if p.c <= PAD_STEM else 8


def least_padding_slices(reduction: int, per_word: int) -> list[int]:
    """The slice widths (words) ordered by the zero padding they add to a flat reduction of
    ``reduction`` elements, the wider first among equals (fewer barriers)."""
    def padded(words: int) -> int:
        return -(-reduction // (words * per_word)) * words * per_word
    return sorted(sorted(MMA_SLICES, reverse=True), key=padded)


# The slices and cp.async stages the backend picks where a variant names none (and its tile
# is not in ASYNC_PIPELINES): 64-word slices (128 halves) only when named (they pad a
# 64-channel tap to twice its size; on the H100 they lost 7-20% in geomean even where C is
# whole slices); up to 4 cp.async stages, as in v5.
DEFAULT_SLICES = (32, 16)
DEFAULT_ASYNC_STAGES = 4
# Measured per tile on the H100 (benchmarks/NOTES-gpu.md, v6 run 2; ResNet-50 b32, 6 layers x
# TF32/F16, geomean ms): the cp.async (slice words, stages) of a variant that names neither,
# where local memory holds them (more than 48 KiB: local_memory_limit) and the slice is no
# wider than a tap's channels; other tiles, and devices with less, take pipeline()'s rule.
# 128x64: 32w 2 stages (0.0484) over 3 (0.0524), 4 (0.0509) and 64w 2 (0.0581): deeper
# pipelines lost. 128x128: 32w 2 (0.0506, 64 KiB) over v5's 16w 3 (0.0518) and 32w 3 (0.0509).
# 64x64: 32w 4 (0.0510, 64 KiB) over v5's 32w 3 (0.0524) and 64w 2 (0.0560).
ASYNC_PIPELINES: dict[MmaTile, tuple[int, int]] = {
    (128, 64, 2, 2): (32, 2), (128, 128, 2, 2): (32, 2), (64, 64, 2, 2): (32, 4),
}


def pipeline(tile: MmaTile, params: Mapping[str, Any], limit: int,
             widths: list[int] | None = None, channels: int | None = None,
             per_word: int = 1) -> tuple[int, str, int]:
    """(slice words, load, stages): what ``params`` name, the rest chosen: registers unless
    cp.async is named, the first of ``widths`` (default: :data:`DEFAULT_SLICES`) that still
    leaves two stages, and as many stages as local memory holds (registers 2, cp.async up to
    :data:`DEFAULT_ASYNC_STAGES`). Wide slices first: on the H100 cp.async in 32-word slices
    with 2 stages beat 16-word slices with 4 by 9-40% (half the barriers per mma;
    benchmarks/NOTES-gpu.md, v5)."""
    load = params.get("load") or "registers"
    most = DEFAULT_ASYNC_STAGES if load == "async" else 2
    named = params.get("slice")
    measured = ASYNC_PIPELINES.get(tuple(tile))  # type: ignore[arg-type]
    if (load == "async" and measured and not named and not params.get("stages")
            and measured[1] * mma_stage_bytes(tile, measured[0]) <= limit
            and (channels is None or measured[0] * per_word <= channels)):
        return measured[0], "async", measured[1]
    widths = widths or list(DEFAULT_SLICES)
    for slice_words in [int(named)] if named else widths:
        fit = limit // mma_stage_bytes(tile, slice_words)
        stages = int(params.get("stages") or max(1, min(most, fit)))
        if named or slice_words == widths[-1] or 2 <= stages <= fit:
            return slice_words, str(load), stages
    raise AssertionError("unreachable: the narrowest slice always returns")


def configure(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime,
              emulate: bool = False) -> MmaConfig:
    """The launch configuration of a resolved tensor-core variant; UnsupportedError for one
    that cannot run here."""
    verdict = mma_supports(p, params)
    if not verdict.ok:
        raise UnsupportedError(verdict.reason, algorithm=ALGORITHM, backend="opencl")
    resolved = verdict.params
    math_mode = str(resolved["math"])
    m = p.n * p.out_h * p.out_w
    asked = resolved.get("mma")
    tile: MmaTile = (tuple(int(v) for v in asked) if asked is not None  # type: ignore[assignment]
                     else default_tile(runtime, m, p.k))
    per_word = elements_per_word(math_mode)
    flat = flat_reduction(p)
    channels = stem_channels(p, math_mode)
    reduction = p.kh * p.kw * channels
    extent = max(p.h, p.w) + max(p.pad) + max((p.kh - 1) * p.dilation[0],
                                              (p.kw - 1) * p.dilation[1])
    if extent >= MAX_EXTENT:
        raise UnsupportedError(f"the tensor-core kernel packs input rows and columns in 16 "
                               f"bits: H={p.h}, W={p.w} with padding {p.pad} and kernel "
                               f"{p.kh}x{p.kw} reach {extent}, at most {MAX_EXTENT - 1}",
                               algorithm=ALGORITHM, backend="opencl")
    unit = 4 if not flat and p.c % (4 * per_word) == 0 else 1
    if flat and channels in (4 * per_word, 2 * per_word) and channels % per_word == 0:
        unit = channels // per_word               # one tap's whole pixel per load unit
    widths = least_padding_slices(reduction, per_word) if flat else None
    slice_words, load, stages = pipeline(tile, resolved, local_memory_limit(runtime),
                                         widths, None if flat else p.c, per_word)
    if slice_words == 64 and not LDMATRIX:
        raise UnsupportedError("slice 64 swizzles 16-byte chunks for ldmatrix; the pair loads "
                               "(LDMATRIX off) know 16 and 32", algorithm=ALGORITHM,
                               backend="opencl")
    if load == "async" and unit == 1:
        raise UnsupportedError(f"load 'async' copies 16 bytes (or a padded stem's 8-byte "
                               f"pixels): C={p.c} is not a multiple of {4 * per_word}",
                               algorithm=ALGORITHM, backend="opencl")
    if not (2 <= stages <= 4 if load == "async" else 1 <= stages <= 2):
        raise UnsupportedError(f"load {load!r} with {stages} stage(s): async keeps 2 to 4, "
                               "registers 1 or 2", algorithm=ALGORITHM, backend="opencl")
    per_tap = reduction if flat else channels
    slices = (1 if flat else p.kh * p.kw) * -(-per_tap // (slice_words * per_word))
    split = resolved.get("split")
    splits = int(split) if split is not None else default_splits(runtime, m, p.k, tile,
                                                                 slices)
    if not 1 <= splits <= slices:
        raise UnsupportedError(f"split {splits}: the reduction has {slices} slices; choose "
                               f"1..{slices}", algorithm=ALGORITHM, backend="opencl")
    return MmaConfig(math_mode, tile, slice_words, load, stages, unit, flat, splits,
                     slices, int(resolved.get("warps_k") or 1), channels)


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime,
             emulate: bool = False) -> Verdict:
    """Whether this device runs the variant: the math mode's own rule first (TF32 only
    under fast math), then tensor cores on the device, then its limits."""
    if p.groups != 1:
        return failed(f"opencl implicit_gemm does not run grouped convolution "
                      f"(groups={p.groups})")
    rule = mma_supports(p, params)
    if not rule.ok:
        return rule
    emulate = emulate or _emulated_here(runtime)
    if not emulate:
        capable = tensor_cores(runtime)
        if not capable.ok:
            return failed(f"no tensor cores for {params.get('math')}: {capable.reason}")
    try:
        config = configure(p, params, runtime, emulate)
    except UnsupportedError as exc:
        return failed(str(exc))
    if config.threads > runtime.max_work_group:
        return failed(f"mma {config.tile} needs {config.threads} work-items per group; the "
                      f"device allows {runtime.max_work_group}")
    if config.local_bytes > local_memory_limit(runtime):
        return failed(f"mma {config.tile} with {config.stages} stage(s) needs "
                      f"{config.local_bytes} bytes of local memory; the device has "
                      f"{local_memory_limit(runtime)} for a work-group")
    return plan_verdict(p, _plan(p, config), runtime)


def _emulated_here(runtime: Runtime) -> bool:
    return EMULATE_WITHOUT_TENSOR_CORES and not tensor_cores(runtime).ok


def _plan(p: ConvProblem, config: MmaConfig) -> BufferPlan:
    m = p.n * p.out_h * p.out_w
    partial = 0 if config.splits == 1 else config.splits * m * p.k
    padded = p.n * p.h * p.w * config.channels if config.channels != p.c else 0
    return io_plan(p).add("partial", partial, 4).add("padded", padded, p.element_size)


def build_options(p: ConvProblem, config: MmaConfig, bias: np.ndarray | None,
                  emulate: bool) -> list[str]:
    bm, bn, wm, wn = config.tile
    # Halves move as bits (never native half arithmetic); DATA_* is the storage of y, bias.
    options = [f"-DMATH_{config.math.upper()}", f"-DDATA_{p.dtype}", f"-DBM={bm}",
               f"-DBN={bn}", f"-DWARPS_M={wm}", f"-DWARPS_N={wn}",
               f"-DWARPS_K={config.warps_k}",
               f"-DSW={config.slice_words}", f"-DSTAGES={config.stages}",
               f"-DASYNC={int(config.load == 'async')}", f"-DUW={config.unit_words}",
               f"-DLDSM={int(LDMATRIX)}"]
    options += prog.geometry_options(p) + prog.activation_options(p) + bias_options(bias)
    options += ["-DFLAT", f"-DCIN={config.channels}", f"-DCSRC={p.c}"] if config.flat else []
    options += [f"-DGROUP_M={GROUP_M}"] if GROUP_M else []
    options += [f"-DCP_L1_B={int(CP_ASYNC_L1_B)}"] if CP_ASYNC_L1_B is not None else []
    options += [f"-DCP_L1={int(CP_ASYNC_L1)}", f"-DFRAG2={int(FRAG2)}",
                f"-DSTAGE_OUT={int(STAGE_OUT)}"]
    options += ["-DB_ROUNDED"] if config.math == "tf32" and ROUND_WEIGHTS else []
    options += specialisations(p, config)
    options += ["-DMMA_FREE"] if MMA_FREE else []
    options += ["-DROLL_K"] if ROLL_KSTEPS else []
    options += ["-DTAP_MASK"] if TAP_MASK else []
    options += [f"-DDIAG_{DIAGNOSE.upper()}"] if DIAGNOSE and not emulate else []
    options += ["-DMMA_EMULATE"] if emulate else []
    if MAX_REGISTERS is not None and not emulate:
        # accepted and ignored by ptxas (v4); the form the extension's text names, with the
        # count as a separate argument, is refused at build ("Don't understand command line
        # argument", v7)
        options.append(f"-cl-nv-maxrregcount={MAX_REGISTERS}")
    return options


def specialisations(p: ConvProblem, config: MmaConfig) -> list[str]:
    """The build options that drop checks this problem cannot fail (SPECIALISE), and where
    cp.async issues the next slice's copies (ISSUE_AT)."""
    options = []
    if SPECIALISE and not config.flat:
        if p.kh == 1 and p.kw == 1 and not any(p.pad):
            options.append("-DNO_BOUNDS")
        if p.c % (config.slice_words * elements_per_word(config.math)) == 0:
            options.append("-DC_WHOLE")
    ksteps = config.slice_words // 8 // config.warps_k
    issue_at = min(ISSUE_AT, ksteps - 1)
    if config.load == "async" and issue_at > 0 and not FRAG2:
        options.append(f"-DISSUE_AT={issue_at}")
    return options


def tf32_rounded(w: np.ndarray) -> np.ndarray:
    """float32 ``w`` rounded as cvt.rna.tf32.f32 rounds it (nearest, ties away from zero, 10
    fraction bits; the low 13 bits zero), so that the kernel need not: infinities stay, NaN
    becomes a NaN whose payload lies in the bits the tensor cores read (a payload only in the
    low 13 bits would read as infinity)."""
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    out = np.where(np.isfinite(w), rounded, bits)
    out = np.where(np.isnan(w), np.uint32(0x7FFFE000), out)
    return out.astype(np.uint32).view(np.float32)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict[str, Any],
            runtime: Runtime, emulate: bool = False) -> OpenCLKernel:
    emulate = emulate or _emulated_here(runtime)
    verdict = supports(p, params, runtime, emulate)
    if not verdict.ok:
        raise UnsupportedError(f"opencl implicit_gemm: {verdict.reason}", algorithm=ALGORITHM,
                               backend="opencl")
    config = configure(p, params, runtime, emulate)
    plan = _plan(p, config)
    check_plan(p, plan, runtime, ALGORITHM)
    dtype = NUMPY_DTYPES[p.dtype]
    options = build_options(p, config, bias, emulate)
    program, options = _program(runtime, options, emulate)
    # OHWI as it comes: each output channel's KH*KW*C weights contiguous (B's columns).
    weights = np.ascontiguousarray(w, dtype=dtype)
    if config.channels != p.c:      # the padded stem: zero weights for the zero channels
        weights = np.pad(weights, [(0, 0)] * 3 + [(0, config.channels - p.c)])
    if "-DB_ROUNDED" in options:
        weights = tf32_rounded(weights)
    w_dev = runtime.buffer(0, weights)
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(plan.sizes["x"])
    y_dev = runtime.buffer(plan.sizes["y"])
    part = runtime.buffer(plan.sizes["partial"]) if config.splits > 1 else runtime.buffer(4)
    steps = []
    x_read = x_dev
    if config.channels != p.c:
        # the padded stem's input, one pixel per work-item, before the convolution
        x_read = runtime.buffer(plan.sizes["padded"])
        pixels = p.n * p.h * p.w
        pad = bind(program, "pad_channels", [x_dev, x_read, pixels])
        steps.append(Step("pad_channels", pad, (pixels, 1, 1),
                          prog.config_id("pad_channels", p, options, [pixels])))
    steps += _launches(p, config, program, options, x_read, w_dev, b_dev, y_dev, part)
    workspace = plan.sizes["partial"] + plan.sizes["padded"]
    return OpenCLKernel(runtime, p, x_dev, y_dev, steps, workspace,
                        keep=[w_dev, b_dev, part, x_read])


def _program(runtime: Runtime, options: list[str], emulate: bool,
             ) -> tuple[cl.Program, list[str]]:
    """The kernel built with ``options`` (and the options as built)."""
    if emulate and runtime.device.type & cl.device_type.CPU:
        # The emulation only checks the kernel's indexing and arithmetic where there are no
        # tensor cores (the tests, on PoCL), and PoCL spends seconds optimising its
        # barrier-heavy fragments: unoptimised it builds ~6x faster. The sums cannot change:
        # TF32 and F16 products are exact in float32, so a fused and an unfused multiply-add
        # round alike. Not on NVIDIA's compiler, which at -cl-opt-disable leaves plain
        # `inline` helpers (common.cl's activate) unresolved ("ptxas fatal: Unresolved extern
        # function").
        options = [*options, "-cl-opt-disable"]
    source = prog.program_source("implicit_gemm_mma", preamble=prog.kernel_source("mma"),
                                 after=("splitk",))
    return runtime.program(source, tuple(options)), options


def _launches(p: ConvProblem, config: MmaConfig, program: cl.Program, options: list[str],
              x: cl.Buffer, w: cl.Buffer, bias: cl.Buffer, y: cl.Buffer, part: cl.Buffer,
              batches: int = 1, strides: tuple[int, int, int] = (0, 0, 0)) -> list[Step]:
    """The kernel's launch (``batches`` of it side by side, ``strides`` elements apart in x,
    w and y, where built BATCHED) and split-K's reduction."""
    m, n = p.n * p.out_h * p.out_w, p.k
    extents = [m, n, config.channels, p.h, p.w, p.out_h, p.out_w, p.pad[0], p.pad[2],
               config.splits, *strides]
    kernel = bind(program, "implicit_gemm_mma", [x, w, bias, y, part, *extents])
    bm, bn = config.tile[:2]
    gws = (-(-n // bn) * config.threads, -(-m // bm), config.splits * batches)
    name = f"implicit_gemm_{config.math}"
    steps = [Step(name, kernel, gws, prog.config_id(name, p, options, [*extents, batches]))]
    if config.splits > 1:
        red_ext = [m, n, n, 0, 0, config.splits]
        reduce = bind(program, "splitk_reduce", [part, bias, y, *red_ext])
        steps.append(Step("splitk_reduce", reduce, (n, m, 1),
                          prog.config_id("splitk_reduce", p, options, red_ext)))
    return steps


def batched_gemm(gemm: ConvProblem, params: Mapping[str, Any], runtime: Runtime,
                 a: cl.Buffer, b: np.ndarray, y: cl.Buffer, batches: int,
                 emulate: bool = False) -> tuple[list[Step], list[cl.Buffer]]:
    """``batches`` GEMMs Y[z] (M x K) = A[z] (M x C) * B[z] (C x K) on tensor cores, as the
    1x1 convolution ``gemm`` (no padding, stride 1, M = its pixels, float32 data, no bias
    or activation: raw float products) applied to each: A[z] rows of C floats on the device,
    ``b`` on the host as [batches][K][C] (each output channel's C values contiguous, as the
    kernel reads OHWI weights), Y[z] rows of K floats. Winograd's batched GEMM runs here.
    Returns the launches and the buffers they need kept alive; split-K is refused (the
    batch already makes the work-groups)."""
    emulate = emulate or _emulated_here(runtime)
    if gemm.kh * gemm.kw != 1 or any(gemm.pad) or gemm.stride != (1, 1) or gemm.dtype != "F32":
        raise ValueError(f"a batched GEMM is an F32 1x1 convolution without padding, got {gemm}")
    if params.get("split") not in (None, 1):
        raise UnsupportedError(f"a batched GEMM runs without split-K, got split "
                               f"{params['split']!r}", algorithm=ALGORITHM, backend="opencl")
    # not the device's default split for one GEMM of this size: the batch fills the device
    params = {**params, "split": 1}
    verdict = supports(gemm, params, runtime, emulate)
    if not verdict.ok:
        raise UnsupportedError(verdict.reason, algorithm=ALGORITHM, backend="opencl")
    config = configure(gemm, params, runtime, emulate)
    options = build_options(gemm, config, None, emulate) + ["-DBATCHED"]
    program, options = _program(runtime, options, emulate)
    weights = np.ascontiguousarray(b, dtype=np.float32)
    if "-DB_ROUNDED" in options:
        weights = tf32_rounded(weights)
    w_dev = runtime.buffer(0, weights)
    part, no_bias = runtime.buffer(4), runtime.buffer(4)
    m = gemm.n * gemm.h * gemm.w
    strides = (m * gemm.c, gemm.k * gemm.c, m * gemm.k)
    steps = _launches(gemm, config, program, options, a, w_dev, no_bias, y, part, batches,
                      strides)
    return steps, [w_dev, part, no_bias]
