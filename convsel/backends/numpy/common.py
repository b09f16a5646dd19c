"""What the numpy algorithms share: dtype checks, padding, windows and output allocation.

Every algorithm computes in float32 (F16 problems are converted on the way in and back by
:func:`~convsel.backends.numpy.epilogue.finish`), writes into a buffer from
:func:`new_output`, and reports the extra memory it allocates per run as its workspace.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...algorithms.shared import ITEM as ITEM
from ...algorithms.shared import WORKSPACE_CAP as WORKSPACE_CAP
from ...errors import InvalidProblemError
from ...problem import ConvProblem
from ...verdict import Verdict, failed, passed

F32 = np.float32

# Value a fresh output buffer is filled with; None leaves it uninitialised (np.empty).
# The correctness tests set NaN so that an element an algorithm forgets to write fails.
OUTPUT_FILL: float | None = None

# WORKSPACE_CAP (the largest per-piece buffer an algorithm allocates) and ITEM (bytes of a
# float32: all workspaces hold float32) live in convsel.algorithms.shared, with the pure
# workspace estimates that depend on them; tests patch the name here.


def pieces(n: int, rows: int, row_bytes: int, cap: int | None = None,
           ) -> list[tuple[slice, slice]]:
    """(images, rows) pieces whose buffers (``row_bytes`` per row) stay under ``cap``: the
    whole batch when it fits, else bands of rows of one image at a time."""
    cap = WORKSPACE_CAP if cap is None else cap
    if n * rows * row_bytes <= cap:
        return [(slice(0, n), slice(0, rows))]
    band = max(1, cap // max(1, row_bytes))
    return [(slice(i, i + 1), slice(top, min(rows, top + band)))
            for i in range(n) for top in range(0, rows, band)]


def piece_bytes(n: int, rows: int, row_bytes: int) -> int:
    """Bytes of the largest piece :func:`pieces` makes."""
    first_images, first_rows = pieces(n, rows, row_bytes)[0]
    return int((first_images.stop - first_images.start)
               * (first_rows.stop - first_rows.start) * row_bytes)


def float_only(p: ConvProblem, algorithm: str) -> Verdict:
    """The numpy backend runs F32 and F16 (float32 accumulation); quantized is selection-only."""
    if not p.is_float:
        return failed(f"numpy {algorithm} runs F32 and F16 only; {p.dtype} is selection-only "
                      "in convsel (quantized arithmetic is not implemented)")
    return passed(f"numpy {algorithm} runs {p.dtype} with float32 accumulation")


def new_output(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 buffer the algorithm must write entirely (NaN-filled under test)."""
    if OUTPUT_FILL is None:
        return np.empty(shape, dtype=F32)
    return np.full(shape, OUTPUT_FILL, dtype=F32)


def as_f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=F32)


def padded_bytes(p: ConvProblem, extra_h: int = 0, extra_w: int = 0) -> int:
    """Bytes of the padded float32 copy of the input (zero when no padding is needed and
    the input is float32 already)."""
    top, bottom, left, right = p.pad
    if not (top or bottom or left or right or extra_h or extra_w) and p.dtype == "F32":
        return 0
    return p.n * (p.h + top + bottom + extra_h) * (p.w + left + right + extra_w) * p.c * ITEM


def patches(p: ConvProblem, xp: np.ndarray) -> np.ndarray:
    """The read-only view (N, OH, OW, KH, KW, C) of every output pixel's receptive field in
    the padded input ``xp``: strides and dilation applied, nothing copied."""
    ext_h, ext_w = p.kernel_extent
    sy, sx = p.stride
    dy, dx = p.dilation
    win = sliding_window_view(xp, (ext_h, ext_w), axis=(1, 2))   # N, H', W', C, eh, ew
    win = win[:, : (p.out_h - 1) * sy + 1 : sy, : (p.out_w - 1) * sx + 1 : sx, :, ::dy, ::dx]
    return win.transpose(0, 1, 2, 4, 5, 3)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def nbytes(*shapes: tuple[int, ...], item: int = ITEM) -> int:
    return sum(math.prod(s) * item for s in shapes)


class Prepared:
    """Base of every prepared numpy kernel: the problem, its bias and its workspace.

    ``accelerated`` says whether it takes the fused (numba) paths, decided when it is
    prepared (:mod:`~convsel.backends.numpy.accel`).

    Scratch buffers are allocated on a kernel's first run and reused by later runs, as ACL
    keeps a function's workspace between runs: freshly allocated large arrays cost a page
    fault per 4 KiB on first touch, which was up to 2/3 of a run. Buffers are per thread,
    so one prepared kernel may run in several threads at once.
    """

    def __init__(self, p: ConvProblem, bias: np.ndarray | None, workspace_bytes: int) -> None:
        from . import accel

        self.problem = p
        self.bias = None if bias is None else as_f32(bias)
        self.workspace_bytes = int(workspace_bytes)
        self._local = threading.local()
        # the fused kernels of the cpu extra, decided once: a kernel keeps its path
        self.accelerated = accel.enabled()

    def scratch(self, name: str, shape: tuple[int, ...], dtype: Any = F32) -> np.ndarray:
        """A ``shape`` view of this thread's persistent buffer ``name`` (which grows to the
        largest shape asked; contents are whatever the last use left)."""
        buffers: dict[str, np.ndarray] = self._local.__dict__.setdefault("buffers", {})
        size = math.prod(shape)
        buf = buffers.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = buffers[name] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)

    def float32(self, x: np.ndarray) -> np.ndarray:
        """``x`` as contiguous float32: itself, or a copy in a persistent buffer."""
        if x.dtype == F32 and x.flags.c_contiguous:
            return x
        out = self.scratch("float32", x.shape)
        np.copyto(out, x)
        return out

    def padded(self, x: np.ndarray, top: int, bottom: int, left: int, right: int,
               ) -> np.ndarray:
        """``x`` (NHWC) with zero rows/columns added, as float32, in this thread's persistent
        buffer: the zero border is written once, each run copies only the interior. No copy
        without padding when ``x`` is float32 already; a negative ``bottom``/``right`` drops
        rows/columns that no output reads."""
        if bottom < 0 or right < 0:
            x = x[:, : x.shape[1] + min(bottom, 0), : x.shape[2] + min(right, 0)]
            bottom, right = max(bottom, 0), max(right, 0)
        if not (top or bottom or left or right):
            return self.float32(x)
        n, h, w, c = x.shape
        shape = (n, h + top + bottom, w + left + right, c)
        buffers: dict[str, np.ndarray] = self._local.__dict__.setdefault("buffers", {})
        xp = buffers.get("padded")
        if xp is None or xp.shape != shape:
            xp = buffers["padded"] = np.zeros(shape, dtype=F32)
        xp[:, top:top + h, left:left + w] = x
        return xp

    def run(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.problem}, workspace={self.workspace_bytes} B)"


def check_x(p: ConvProblem, x: Any) -> np.ndarray:
    """The input as an NHWC array of this problem's shape (a kernel may be run directly)."""
    shape = (p.n, p.h, p.w, p.c)
    if not isinstance(x, np.ndarray) or x.shape != shape:
        raise InvalidProblemError("x", getattr(x, "shape", type(x).__name__),
                                  f"expected an NHWC array of shape {shape}")
    return x
