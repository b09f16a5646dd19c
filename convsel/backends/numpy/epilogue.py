"""What every numpy algorithm does after its main loop: bias, activation, output dtype."""

from __future__ import annotations

import numpy as np

from ...problem import ConvProblem
from .profile import phase


def finish(p: ConvProblem, y: np.ndarray, bias: np.ndarray | None,
           accelerated: bool = False) -> np.ndarray:
    """Add ``bias`` and apply the fused activation in float32, in place where possible,
    then cast to the problem's dtype (F16 problems accumulate in float32). Algorithms that
    fold the bias into their GEMM or their last copy pass ``bias=None``. ``accelerated``:
    bias and activation in one threaded pass (the cpu extra's fused epilogue)."""
    if bias is None and p.activation is None and p.dtype != "F16":
        return y
    if accelerated and y.dtype == np.float32 and y.flags.c_contiguous and (
            bias is not None or p.activation is not None):
        from .fused.activation import code_of
        from .fused.epilogue import bias_activation

        with phase("epilogue"):
            bias_activation(y, None if bias is None else bias.astype(np.float32, copy=False),
                            code_of(p.activation))
        return cast(p, y)
    with phase("epilogue"):
        if bias is not None:
            y += bias.astype(np.float32, copy=False)
        if p.activation is not None:
            y = p.activation.apply(y)
        return y.astype(np.float16, copy=False) if p.dtype == "F16" else y


def cast(p: ConvProblem, y: np.ndarray) -> np.ndarray:
    """The output in the problem's dtype, for kernels that applied bias and activation
    themselves (a fused kernel)."""
    if p.dtype != "F16":
        return y
    with phase("epilogue"):
        return y.astype(np.float16)
