"""Implicit GEMM on OpenCL (kernels/implicit_gemm.cl): the convolution as one GEMM whose
input tiles are gathered from NHWC straight into local memory; no im2col buffer.

The same kernel, with a 1x1 geometry, is the tiled GEMM of gemm_1x1, im2col_gemm and
Winograd (:func:`tiled_gemm_step`). Its parameters are the tile ``(TM, TN, TK, WM, WN)``, the
load width ``vec`` and ``buffers`` (1 or 2 local buffers, the kernel's DOUBLE_BUFFER); a caller
that names none gets the default of the device class (:data:`DOUBLE_BUFFER` for ``buffers``:
two on GPUs for 1x1 geometries).
Variants that name a ``math`` mode run on tensor cores instead (:mod:`.implicit_gemm_mma`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from ...algorithms.implicit_gemm import tile_problem
from ...algorithms.shared import MAX_SPLITS
from ...errors import UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from . import implicit_gemm_mma
from . import program as prog
from .launch import Step, bind
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

Tile = tuple[int, int, int, int, int]
# A GPU wants many work-items per group and big register tiles; on a CPU device (PoCL) a
# work-group is a loop on one core, so smaller tiles keep the local arrays in cache.
GPU_TILE: Tile = (128, 128, 8, 8, 8)
CPU_TILE: Tile = (32, 32, 8, 4, 4)
# GPU tiles from big to small: the default is the biggest that still gives every compute
# unit a few work-groups (small layers at batch 1 want small tiles).
_GPU_LADDER: tuple[Tile, ...] = (GPU_TILE, (128, 64, 8, 8, 4), (64, 64, 16, 4, 4),
                                 (32, 64, 16, 4, 4), (32, 32, 8, 4, 4))
# Local buffers where ``buffers`` is not named. None: two (one barrier per slice instead of
# two) on GPUs for one-tap (1x1) geometries, one elsewhere. On the H100 (ResNet-50 batch 32,
# benchmarks/NOTES-gpu.md "Double-buffered local memory") two buffers made the 1x1 layers'
# best implicit GEMM 5-8% faster but the 3x3 and 7x7 ones 1-2.5% slower, both beyond the
# A/A noise (+-1.2%), in two runs; CPU devices are unmeasured. True or False: two or one
# everywhere (benchmarks' A/B, tests). Two only where they fit the device's local memory.
DOUBLE_BUFFER: bool | None = None


@dataclass(frozen=True)
class Geometry:
    """How A is gathered: the convolution's input geometry, or a row-major (M x C) matrix
    (``matrix``: 1x1, unit stride, no padding, H = M rows)."""

    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    n: int
    h: int
    w: int
    out_h: int
    out_w: int
    pad_top: int
    pad_left: int

    @staticmethod
    def conv(p: ConvProblem) -> Geometry:
        return Geometry(p.kh, p.kw, p.stride, p.dilation, p.n, p.h, p.w, p.out_h, p.out_w,
                        p.pad[0], p.pad[2])

    @staticmethod
    def matrix(rows: int) -> Geometry:
        return Geometry(1, 1, (1, 1), (1, 1), 1, rows, 1, rows, 1, 0, 0)

    @property
    def m(self) -> int:
        return self.n * self.out_h * self.out_w


def default_tile(runtime: Runtime, m: int, n: int, batches: int = 1) -> Tile:
    """The tile used when the caller names none: on a GPU the largest that still makes
    about two work-groups per compute unit, on other devices :data:`CPU_TILE`."""
    if not runtime.device.type & cl.device_type.GPU:
        return CPU_TILE
    want = 2 * int(runtime.device.max_compute_units)
    for tile in _GPU_LADDER:
        if -(-m // tile[0]) * -(-n // tile[1]) * batches >= want:
            return tile
    return _GPU_LADDER[-1]


def default_splits(runtime: Runtime, m: int, n: int, tile: Tile, slices: int,
                   batches: int = 1) -> int:
    """Split-K factor when the caller names none: on a GPU, enough splits of the reduction
    to give about two work-groups per compute unit, each split keeping at least 8 slices;
    1 elsewhere (a CPU device is busy with a handful of groups) and for batched GEMMs."""
    if batches != 1 or not runtime.device.type & cl.device_type.GPU:
        return 1
    groups = -(-m // tile[0]) * -(-n // tile[1])
    want = 2 * int(runtime.device.max_compute_units)
    return max(1, min(want // groups, slices // 8, MAX_SPLITS))


@dataclass(frozen=True)
class Config:
    """Everything that shapes one implicit-GEMM launch on a device."""

    tile: Tile
    vec: int
    splits: int
    merge_kw: bool
    buffers: int = 1


def configure(params: Mapping[str, Any], runtime: Runtime, geo: Geometry, c: int, n: int,
              batches: int = 1, merge: bool = True) -> Config:
    """The launch configuration: ``params`` (tile, vec, split), the device class's defaults
    filling what is missing; raises UnsupportedError for parameters that cannot run."""
    m = geo.m
    tile = params.get("tile")
    tile = tuple(int(v) for v in tile) if tile is not None else default_tile(runtime, m, n,
                                                                             batches)
    why = tile_problem(tile)
    if why:
        raise UnsupportedError(why, algorithm="implicit_gemm", backend="opencl")
    vec = params.get("vec")
    vec = int(vec) if vec is not None else (4 if c % 4 == 0 and n % 4 == 0 and c >= 8 else 1)
    if vec == 4 and (c % 4 or n % 4):
        raise UnsupportedError(f"vec 4 needs C and K multiples of 4, got C={c}, K={n}",
                               algorithm="implicit_gemm", backend="opencl")
    # the 7x7 RGB stem: a kernel row's taps are one run of KW*C values in an NHWC row
    merge = merge and geo.dilation[1] == 1 and geo.kw > 1 and c < 8 and vec == 1
    per_tap = geo.kw * c if merge else c
    slices = (geo.kh if merge else geo.kh * geo.kw) * -(-per_tap // tile[2])
    splits = params.get("split")
    splits = int(splits) if splits is not None else default_splits(runtime, m, n, tile,
                                                                   slices, batches)
    if not 1 <= splits <= max(1, slices):
        raise UnsupportedError(f"split {splits}: the reduction has {slices} slices of "
                               f"{tile[2]}; choose 1..{max(1, slices)}",
                               algorithm="implicit_gemm", backend="opencl")
    return Config(tile, vec, splits, merge, _buffers(params, runtime, geo, tile))


def _buffers(params: Mapping[str, Any], runtime: Runtime, geo: Geometry, tile: Tile) -> int:
    """Local buffers: as named (supports() checks that they fit), else two where
    :data:`DOUBLE_BUFFER` asks for them and they fit the device, else one."""
    named = params.get("buffers")
    if named is not None:
        if str(named) not in ("1", "2"):
            raise UnsupportedError(f"buffers must be 1 or 2 (local buffers), got {named!r}",
                                   algorithm="implicit_gemm", backend="opencl")
        return int(named)
    if DOUBLE_BUFFER is None:
        wanted = bool(runtime.device.type & cl.device_type.GPU) and geo.kh * geo.kw == 1
    else:
        wanted = DOUBLE_BUFFER
    fits = _local_bytes(tile, 2) <= int(runtime.device.local_mem_size)
    return 2 if wanted and fits else 1


def _local_bytes(tile: Tile, buffers: int = 1) -> int:
    """The kernel's As and Bs: ``buffers`` slices of TK rows of TM + 4 and TN + 4 floats."""
    tm, tn, tk = tile[:3]
    return buffers * tk * (tm + tn + 8) * 4


def partial_bytes(config: Config, m: int, n: int, batches: int = 1) -> int:
    """Split-K's workspace: one float partial sum per split and output."""
    return 0 if config.splits == 1 else config.splits * batches * m * n * 4


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    if params.get("math") is not None:       # a tensor-core variant
        return implicit_gemm_mma.supports(p, params, runtime)
    if p.groups != 1:
        return failed(f"opencl implicit_gemm does not run grouped convolution "
                      f"(groups={p.groups})")
    try:
        config = configure(params, runtime, Geometry.conv(p), p.c, p.k)
    except UnsupportedError as exc:
        return failed(str(exc))
    tile = config.tile
    threads = (tile[0] // tile[3]) * (tile[1] // tile[4])
    if threads > runtime.max_work_group:
        return failed(f"tile {tile} needs {threads} work-items per group; the device allows "
                      f"{runtime.max_work_group}")
    need, have = _local_bytes(tile, config.buffers), int(runtime.device.local_mem_size)
    if need > have:
        how = " double-buffered (buffers=2)" if config.buffers == 2 else ""
        return failed(f"tile {tile}{how} needs {need} bytes of local memory; the device has "
                      f"{have}")
    return plan_verdict(p, _plan(p, config), runtime)


def _plan(p: ConvProblem, config: Config) -> BufferPlan:
    m = p.n * p.out_h * p.out_w
    return io_plan(p).add("partial", partial_bytes(config, m, p.k) // 4, 4)


@dataclass
class Launches:
    """The steps of one tiled GEMM, the buffers they need kept alive, and their bytes."""

    steps: list[Step]
    keep: list[cl.Buffer]
    workspace_bytes: int


def tiled_gemm(runtime: Runtime, p: ConvProblem, geo: Geometry, config: Config, *, c: int,
               n: int, x: cl.Buffer, w: cl.Buffer, bias: cl.Buffer, y: cl.Buffer,
               epilogue: list[str] | None, ldy: int | None = None, batches: int = 1,
               a_batch: int = 0, b_batch: int = 0, y_batch: int = 0, bias_batch: int = 0,
               indirection: cl.Buffer | None = None, name: str = "implicit_gemm") -> Launches:
    """Y[b] = gather(x)[b] (M x KH*KW*c) * w[b] (KH*KW*c x n) with the implicit-GEMM kernel
    (+ split-K's reduction). ``epilogue`` is the bias/activation options (Y in the data
    type), or None for float A, B, Y stored raw (Winograd). ``indirection`` (int32
    [M][KH*KW], element offsets of input pixels, -1 for padding) replaces the geometry's
    addressing (indirect_gemm)."""
    tm, tn, tk, wm, wn = config.tile
    options = prog.dtype_options(p, runtime) + [
        f"-DTM={tm}", f"-DTN={tn}", f"-DTK={tk}", f"-DWM={wm}", f"-DWN={wn}",
        f"-DVW={config.vec}", f"-DKH={geo.kh}", f"-DKW={geo.kw}", f"-DSY={geo.stride[0]}",
        f"-DSX={geo.stride[1]}", f"-DDY={geo.dilation[0]}", f"-DDX={geo.dilation[1]}"]
    options += ["-DMERGE_KW"] if config.merge_kw else []
    options += ["-DDOUBLE_BUFFER"] if config.buffers == 2 else []
    options += ["-DINDIRECT"] if indirection is not None else []
    options += ["-DGEMM_FLOAT_IO"] if epilogue is None else ["-DEPILOGUE", *epilogue]
    source = prog.program_source("implicit_gemm", after=("splitk",))
    program = runtime.program(source, tuple(options))
    m, splits = geo.m, config.splits
    ldy = n if ldy is None else ldy
    nbytes = partial_bytes(config, m, n, batches)
    part = runtime.buffer(nbytes) if nbytes else runtime.buffer(4)
    extents = [m, n, c, geo.h, geo.w, geo.out_h, geo.out_w, geo.pad_top, geo.pad_left,
               ldy, a_batch, b_batch, y_batch, bias_batch, splits]
    ind = [] if indirection is None else [indirection]
    kernel = bind(program, "implicit_gemm", [x, w, bias, y, part, *ind, *extents])
    gws = (-(-n // tn) * (tn // wn), -(-m // tm) * (tm // wm), batches * splits)
    steps = [Step(name, kernel, gws, prog.config_id(name, p, options, [*extents, batches]))]
    if splits > 1:
        red_ext = [m, n, ldy, y_batch, bias_batch, splits]
        reduce = bind(program, "splitk_reduce", [part, bias, y, *red_ext])
        steps.append(Step("splitk_reduce", reduce, (n, m, batches),
                          prog.config_id("splitk_reduce", p, options, [*red_ext, batches])))
    return Launches(steps, [part], nbytes)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict[str, Any],
            runtime: Runtime) -> OpenCLKernel:
    if params.get("math") is not None:
        return implicit_gemm_mma.prepare(p, w, bias, params, runtime)
    verdict = supports(p, params, runtime)
    if not verdict.ok:
        raise UnsupportedError(f"opencl implicit_gemm: {verdict.reason}",
                               algorithm="implicit_gemm", backend="opencl")
    geo = Geometry.conv(p)
    config = configure(params, runtime, geo, p.c, p.k)
    plan = _plan(p, config)
    check_plan(p, plan, runtime, "implicit_gemm")
    dtype = NUMPY_DTYPES[p.dtype]
    # OHWI -> [KH][KW][C][K]: row r = (i*KW + j)*C + c of B.
    w_dev = runtime.buffer(0, np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0)), dtype=dtype))
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(plan.sizes["x"])
    y_dev = runtime.buffer(plan.sizes["y"])
    run = tiled_gemm(runtime, p, geo, config, c=p.c, n=p.k, x=x_dev, w=w_dev, bias=b_dev,
                     y=y_dev, epilogue=prog.activation_options(p) + bias_options(bias))
    return OpenCLKernel(runtime, p, x_dev, y_dev, run.steps, run.workspace_bytes,
                        keep=[w_dev, b_dev, *run.keep])
