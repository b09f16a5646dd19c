"""Winograd F(tile, kernel) on OpenCL, NHWC, stride 1: the filter transform once on the host
at prepare time; per run, the input transform (kernels/winograd.cl), one batched GEMM per
point of the transformed tile (the implicit-GEMM kernel with a 1x1 geometry) and the output
transform with bias and activation. The transforms come from
:mod:`convsel.winograd_transforms`; intermediates are float32 for F16 too.

A variant that names ``math="tf32"`` (F32 problems under fast math only) runs the batched
GEMM on tensor cores instead (:func:`.implicit_gemm_mma.batched_gemm`, its other
parameters those of the tensor-core implicit GEMM: ``mma``, ``load``, ``slice``,
``stages``): the transformed input and filter are rounded to TF32 there, so the error
grows with the transforms' magnitudes (:func:`.mma.winograd_error_bound`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...algorithms.winograd import gemm_problem, mma_params, mma_rule
from ...errors import UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from ...winograd_transforms import tile_verdict, winograd_matrices_2d
from . import implicit_gemm_mma
from . import program as prog
from .gemm_kernel import GemmShape, gemm_step
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


def _plan(p: ConvProblem, tile: tuple[int, int]) -> BufferPlan:
    ah, aw = tile[0] + p.kh - 1, tile[1] + p.kw - 1
    tiles = p.n * -(-p.out_h // tile[0]) * -(-p.out_w // tile[1])
    return (io_plan(p).add("V", ah * aw * tiles * p.c, 4).add("M", ah * aw * tiles * p.k, 4)
            .add("U", ah * aw * p.c * p.k, 4))


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    tile = tile_verdict(p, params, "opencl")
    if not tile.ok:
        return tile
    if params.get("math") is not None:
        why = mma_rule(p, params)
        if why:
            return failed(why)
        gemm = implicit_gemm_mma.supports(gemm_problem(p, tile.params["tile"]),
                                          {**mma_params(params), "split": 1}, runtime)
        if not gemm.ok:
            return failed(f"winograd's batched GEMM on tensor cores: {gemm.reason}")
    return plan_verdict(p, _plan(p, tile.params["tile"]), runtime)


def _constants(name: str, matrix: np.ndarray) -> str:
    values = ", ".join(prog.float_literal(v) for v in np.asarray(matrix).ravel())
    return f"__constant float {name}[{matrix.size}] = {{{values}}};"


def preamble(tile: tuple[int, int], kernel: tuple[int, int]) -> str:
    """The generated sizes and transform matrices of F(tile, kernel) as OpenCL constants."""
    (at_y, _, bt_y), (at_x, _, bt_x) = winograd_matrices_2d(tile, kernel)
    lines = [f"#define MH {tile[0]}", f"#define MW {tile[1]}",
             f"#define AH {bt_y.shape[0]}", f"#define AW {bt_x.shape[0]}",
             _constants("BT_Y", bt_y), _constants("BT_X", bt_x),
             _constants("AT_Y", at_y), _constants("AT_X", at_x)]
    return "\n".join(lines)


def filter_transform(w: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """OHWI weights -> U[AH][AW][C][K] = G_y g G_x^T per (k, c), in float64 then float32."""
    _k, kh, kw, _ = w.shape
    (_, g_y, _), (_, g_x, _) = winograd_matrices_2d(tile, (kh, kw))
    u = np.einsum("ai,kijc,bj->abck", g_y, w.astype(np.float64), g_x, optimize=True)
    return np.ascontiguousarray(u, dtype=np.float32)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict[str, Any],
            runtime: Runtime) -> OpenCLKernel:
    verdict = supports(p, params, runtime)
    if not verdict.ok:
        raise UnsupportedError(verdict.reason, algorithm="winograd", backend="opencl")
    tile = tile_verdict(p, params, "opencl").params["tile"]
    plan = _plan(p, tile)
    check_plan(p, plan, runtime, "winograd")
    dtype = NUMPY_DTYPES[p.dtype]
    ah, aw = tile[0] + p.kh - 1, tile[1] + p.kw - 1
    th, tw = -(-p.out_h // tile[0]), -(-p.out_w // tile[1])
    tiles = p.n * th * tw
    u_host = filter_transform(w, tile)
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev, y_dev = runtime.buffer(plan.sizes["x"]), runtime.buffer(plan.sizes["y"])
    v_dev, m_dev = runtime.buffer(plan.sizes["V"]), runtime.buffer(plan.sizes["M"])

    options = (prog.dtype_options(p, runtime) + prog.activation_options(p)
               + bias_options(bias) + [f"-DKH={p.kh}", f"-DKW={p.kw}"])
    program = runtime.program(prog.program_source("winograd", preamble(tile, (p.kh, p.kw))),
                              tuple(options))
    tile_opts = options + [f"-DMH={tile[0]}", f"-DMW={tile[1]}"]   # for the tuner's id only
    in_ext = [p.h, p.w, p.c, th, tw, tiles, p.pad[0], p.pad[2]]
    transform_in = Step("winograd_input",
                        bind(program, "winograd_input", [x_dev, v_dev, *in_ext]),
                        (p.c, tiles, 1), prog.config_id("winograd_input", p, tile_opts, in_ext))
    if params.get("math") is not None:
        # U as [point][K][C]: each output channel's C values contiguous, as the tensor-core
        # kernel reads its B
        u_kc = np.ascontiguousarray(np.swapaxes(u_host, 2, 3))
        gemm_steps, gemm_keep = implicit_gemm_mma.batched_gemm(
            gemm_problem(p, tile), mma_params(params), runtime, v_dev, u_kc, m_dev, ah * aw)
        gemm_workspace = 0
    else:
        u_dev = runtime.buffer(0, u_host)
        shape = GemmShape(m=tiles, n=p.k, kd=p.c, lda=p.c, ldb=p.k, ldc=p.k,
                          batches=ah * aw, a_batch=tiles * p.c, b_batch=p.c * p.k,
                          c_batch=tiles * p.k)
        gemm = gemm_step(runtime, p, shape, v_dev, u_dev, b_dev, m_dev, epilogue=None)
        gemm_steps, gemm_keep = gemm.steps, [u_dev, *gemm.keep]
        gemm_workspace = gemm.workspace_bytes
    out_ext = [p.k, p.out_h, p.out_w, th, tw, tiles]
    transform_out = Step("winograd_output",
                         bind(program, "winograd_output", [m_dev, b_dev, y_dev, *out_ext]),
                         (p.k, tiles, 1),
                         prog.config_id("winograd_output", p, tile_opts, out_ext))
    workspace = plan.sizes["V"] + plan.sizes["M"] + plan.sizes["U"] + gemm_workspace
    return OpenCLKernel(runtime, p, x_dev, y_dev, [transform_in, *gemm_steps, transform_out],
                        workspace, keep=[b_dev, v_dev, m_dev, *gemm_keep])
