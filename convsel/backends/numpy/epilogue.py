"""What every numpy algorithm does after its main loop: bias, activation, output dtype."""

from __future__ import annotations

import numpy as np

from ...problem import ConvProblem
from .profile import phase


def finish(p: ConvProblem, y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Add ``bias`` and apply the fused activation in float32, in place where possible,
    then cast to the problem's dtype (F16 problems accumulate in float32). Algorithms that
    fold the bias into their GEMM or their last copy pass ``bias=None``."""
    if bias is None and p.activation is None and p.dtype != "F16":
        return y
    with phase("epilogue"):
        if bias is not None:
            y += bias.astype(np.float32, copy=False)
        if p.activation is not None:
            y = p.activation.apply(y)
        return y.astype(np.float16, copy=False) if p.dtype == "F16" else y
