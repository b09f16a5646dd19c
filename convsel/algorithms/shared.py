"""What several algorithm homes use: constraint builders, the numpy backend's piece sizing,
the OpenCL GEMMs' split-K bound, and the tolerance levels. Pure: no arrays, no devices.

The constants here are the backends' own: ``convsel.backends.numpy.common`` imports
:data:`ITEM` and :data:`WORKSPACE_CAP`, ``convsel.backends.opencl.implicit_gemm`` imports
:data:`MAX_SPLITS`, so the estimates and the kernels cannot disagree about them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed, passed
from .spec import Constraint

# -- constraints ----------------------------------------------------------------------------


def any_problem(name: str) -> Constraint:
    def check(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
        return passed(f"{name} runs every problem, grouped and dilated included")
    return check


def ungrouped(name: str, reason: str) -> Constraint:
    def check(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
        if p.groups != 1:
            return failed(f"{name} does not run grouped convolution (groups={p.groups})")
        return passed(reason)
    return check


# -- tolerances (see AlgorithmSpec.tolerance) -------------------------------------------------
# float32 accumulation: ~1e-7 per rounding, a few hundred terms per output in the suite.
F32_EXACT = 1e-5
# float16 output: the result itself is rounded to half (2**-11 relative).
F16_ROUNDED = 1.5e-3

# -- the numpy backend: float32 scratch, processed in pieces ----------------------------------
ITEM = 4                    # bytes of a float32: all numpy workspaces hold float32
# Largest per-piece buffer (bytes) a numpy algorithm allocates: a bigger problem is processed
# in pieces (rows of output of one image) so that im2col of a 1080p 9x9 layer is not a 40 GiB
# matrix. ResNet/MobileNet-sized layers fit in one piece, i.e. one GEMM.
WORKSPACE_CAP = 64 << 20


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def piece_bytes(n: int, rows: int, row_bytes: int) -> int:
    """The largest piece the numpy backend's ``pieces()`` makes (whole batch, else bands)."""
    if n * rows * row_bytes <= WORKSPACE_CAP:
        return n * rows * row_bytes
    band = max(1, WORKSPACE_CAP // max(1, row_bytes))
    return min(band, rows) * row_bytes


def padded_bytes(p: ConvProblem) -> int:
    """The numpy backend's padded float32 copy of the input (0 when it needs none)."""
    top, bottom, left, right = p.pad
    if not (top or bottom or left or right) and p.dtype == "F32":
        return 0
    return p.n * (p.h + top + bottom) * (p.w + left + right) * p.c * ITEM


# -- the OpenCL GEMMs' split-K ----------------------------------------------------------------
# The OpenCL GEMMs may split their reduction (split-K) on GPU devices, with a float partial
# sum per split and output as workspace; how many splits depends on the device's compute
# units, which a pure estimate cannot know. The estimate adds the most any device can get
# (backends.opencl.implicit_gemm.default_splits: at most MAX_SPLITS, and at least 8 slices of
# the reduction per split), so it is an upper bound on GPUs and exact on CPU devices and
# wherever no split is made (batched GEMMs, short reductions).
MAX_SPLITS = 16


def split_k_bytes(m: int, n: int, reduction: int, batches: int = 1,
                  params: Mapping[str, Any] | None = None) -> int:
    """The most split-K workspace an (m x reduction) @ (reduction x n) GEMM can take; exact
    when ``params`` names ``split``."""
    if batches != 1:
        return 0
    asked = (params or {}).get("split")
    splits = int(asked) if asked is not None else min(MAX_SPLITS, reduction // 8)
    return 0 if splits <= 1 else splits * m * n * 4
