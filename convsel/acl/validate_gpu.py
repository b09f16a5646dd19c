"""ACL's OpenCL validate() predicates as the v52.3.0 heuristic calls them (spec §5).

The device facts (fp16) come from the target; ACL asks the real device, convsel the rules.
"""

from __future__ import annotations

from ..problem import ConvProblem
from ..rules import Rules
from ..targets import Target
from ..verdict import Verdict, failed, passed

_GROUPS = "ACL's Conv2d has no groups: weights IFM must equal src C (groups must be 1)"


def _dtype_problem(p: ConvProblem, target: Target, allowed: tuple[str, ...]) -> str | None:
    if p.dtype not in allowed:
        return f"dtype {p.dtype} is not one of {'/'.join(allowed)}"
    if p.dtype == "F16" and not target.fp16:
        return f"F16 needs cl_khr_fp16; target {target.name} has none"
    if p.groups != 1:
        return _GROUPS
    return None


def winograd_tile(p: ConvProblem, rules: Rules) -> tuple[int, int] | None:
    """The output tile ClWinogradConv2d picks for this kernel (rows, cols), or None."""
    cfg = rules.gpu.winograd
    extent = max(p.kh, p.kw)
    side = cfg.tile_by_kernel_extent.get(extent)
    if side is None:
        return None
    small = cfg.nchw_small_input
    if p.layout == "NCHW" and p.w <= small.max_w and p.h <= small.max_h:
        side = small.tile_by_kernel_extent.get(extent, side)
    return (1 if p.kh == 1 else side, 1 if p.kw == 1 else side)


def winograd(p: ConvProblem, target: Target, rules: Rules) -> Verdict:
    """``ClWinogradConv2d::validate`` with the problem's fast-math flag (§5.1)."""
    problem = _dtype_problem(p, target, ("F32", "F16"))
    if problem:
        return failed(problem)
    tile = winograd_tile(p, rules)
    if tile is None:
        return failed(f"kernel {p.kh}x{p.kw}: no Winograd output tile for this size")
    half_h, half_w = p.kh // 2, p.kw // 2
    if max(p.pad[:2]) > half_h or max(p.pad[2:]) > half_w:
        return failed(f"pad {p.pad}: Winograd needs top/bottom <= {half_h} and "
                      f"left/right <= {half_w}")
    kernel = (p.kh, p.kw)
    if not p.fast_math:
        if p.dtype == "F16":
            return failed("F16 Winograd needs fast-math")
        slow = [(e.tile, e.kernel) for e in rules.gpu.winograd.fast_math_pairs]
        if (tile, kernel) in slow:
            return failed(f"F32 {p.kh}x{p.kw} with a {tile[0]}x{tile[1]} tile needs fast-math")
    if p.stride != (1, 1):
        return failed(f"stride {p.stride[0]}x{p.stride[1]}: Winograd needs stride 1x1")
    pairs = [(e.tile, e.kernel) for e in rules.gpu.winograd.pairs[p.layout]]  # type: ignore[index]  # layout is validated
    if (tile, kernel) not in pairs:
        return failed(f"{p.layout} has no Winograd kernel for tile {tile[0]}x{tile[1]}, "
                      f"kernel {p.kh}x{p.kw}")
    return passed(f"{p.layout} {p.kh}x{p.kw} kernel with a {tile[0]}x{tile[1]} output tile",
                  tile=tile)


def direct(p: ConvProblem, target: Target, rules: Rules) -> Verdict:
    """``ClDirectConv2d::validate`` (§5.2)."""
    problem = _dtype_problem(p, target, ("F32", "F16", "QASYMM8", "QASYMM8_SIGNED"))
    if problem:
        return failed(problem)
    if p.layout == "NHWC":
        return passed("NHWC direct convolution takes any kernel, stride and padding")
    cfg = rules.gpu.direct_nchw
    if p.kh != p.kw:
        return failed(f"NCHW direct needs a square kernel, got {p.kh}x{p.kw}")
    sizes = cfg.float_kernels if p.is_float else cfg.quantized_kernels
    if p.kh not in sizes:
        return failed(f"NCHW {'float' if p.is_float else 'quantized'} direct supports kernels "
                      f"{', '.join(map(str, sizes))}, not {p.kh}")
    max_sx = cfg.max_stride_x.get(p.kh, cfg.max_stride_x["default"])
    if p.stride[1] > max_sx:
        return failed(f"NCHW direct {p.kh}x{p.kh} needs stride_x <= {max_sx}, got {p.stride[1]}")
    return passed(f"NCHW direct {p.kh}x{p.kh}, stride_x {p.stride[1]}")


def indirect(p: ConvProblem, target: Target) -> Verdict:
    """``ClIndirectConv2d::validate`` (§5.3)."""
    problem = _dtype_problem(p, target, ("F32", "F16"))
    if problem:
        return failed(problem)
    if p.layout != "NHWC":
        return failed("indirect convolution accepts NHWC only")
    return passed("NHWC indirect convolution takes any kernel, stride and padding")


def fft(p: ConvProblem, target: Target) -> Verdict:
    """``CLFFTConvolutionLayer::validate`` (§5.4), with the output shape known."""
    if p.groups != 1:
        return failed(_GROUPS)
    if p.dtype == "F16" and not p.fast_math:
        return failed("F16 FFT needs fast-math")
    if p.dtype not in ("F32", "F16"):
        return failed(f"dtype {p.dtype} is not F32/F16")
    if p.kh != p.kw:
        return failed(f"FFT needs a square kernel, got {p.kh}x{p.kw}")
    half = p.kh // 2
    if p.pad != (half,) * 4:
        return failed(f"FFT needs every pad equal to {half} (kernel {p.kh}//2), got {p.pad}")
    if p.stride[0] != p.stride[1] and p.stride[1] != 1:
        return failed(f"stride {p.stride}: FFT needs equal strides or stride_x 1")
    if (p.out_h, p.out_w) != (p.h, p.w):
        return failed(f"FFT output must keep the input size {p.h}x{p.w}, got "
                      f"{p.out_h}x{p.out_w}")
    return passed(f"square {p.kh}x{p.kh} kernel with 'same' padding")


def gemm(p: ConvProblem) -> Verdict:
    """``ClGemmConv2d``: im2col + GEMM, ACL's general fallback."""
    if p.groups != 1:
        return failed(_GROUPS)
    return passed("im2col + GEMM runs every ungrouped problem")
