"""Kernel sources and the ``-D`` build options that specialise them for one problem.

Every program is ``kernels/common.cl`` (data type, loads/stores, fused activation) plus an
optional generated preamble (Winograd's constant matrices) plus the algorithm's own file,
concatenated here rather than ``#include``-d, so no driver needs an include path.

Programs are specialised on what shapes the generated code: data type and half path,
activation, kernel size, stride, dilation, Winograd tile and register blocking. Tensor
extents (N, H, W, C, K, padding) are kernel arguments, so one build serves every layer of a
given geometry; the tuner's configuration id still includes them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np

from ... import config
from ...activation import KINDS
from ...problem import ConvProblem
from .runtime import Runtime

# Activation ids understood by common.cl's activate(); 0 is the identity.
ACTIVATION_IDS: dict[str, int] = {
    "relu": 1, "bounded_relu": 2, "lu_bounded_relu": 3, "leaky_relu": 4, "linear": 5,
    "logistic": 6, "tanh": 7, "elu": 8, "swish": 9, "hard_swish": 10, "abs": 11}
assert set(ACTIVATION_IDS) == set(KINDS), "every activation kind needs a kernel id"

HALF_ENV = config.variable("cl_half")  # "auto" (default) or "storage": never native half maths
_EPILOGUE_OPTIONS = ("-DACT", "-DHAS_BIAS")


@cache
def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>.cl`` shipped in the package."""
    return (resources.files(__package__) / "kernels" / f"{name}.cl").read_text(encoding="utf-8")


def program_source(name: str, preamble: str = "", after: tuple[str, ...] = ()) -> str:
    """common.cl, ``preamble``, the kernel file ``name``, then the shared files ``after``
    (kernels that several programs hold, such as split-K's reduction)."""
    parts = (kernel_source("common"), preamble, kernel_source(name),
             *(kernel_source(extra) for extra in after))
    return "\n".join(parts)


def float_literal(value: float) -> str:
    """A float as an OpenCL C float literal that round-trips float32 (``6.000000000e+00f``)."""
    return f"{float(np.float32(value)):.9e}f"


def half_mode(p: ConvProblem, runtime: Runtime) -> str | None:
    """How F16 runs: "native" half arithmetic only on a device with cl_khr_fp16 (and unless
    ``$CONVSEL_CL_HALF=storage``), else "storage" (vload_half/vstore_half, float maths).
    None for F32."""
    if p.dtype != "F16":
        return None
    if runtime.fp16 and (config.current().cl_half or "auto").strip().lower() != "storage":
        return "native"
    return "storage"


def dtype_options(p: ConvProblem, runtime: Runtime, half: str | None = None) -> list[str]:
    """``-DDATA_F16`` (+ ``-DHALF_NATIVE``) or ``-DDATA_F32``; ``half`` overrides the mode
    (tests force "native" to check what a device without cl_khr_fp16 says)."""
    mode = half or half_mode(p, runtime)
    if mode is None:
        return ["-DDATA_F32"]
    return ["-DDATA_F16", "-DHALF_NATIVE"] if mode == "native" else ["-DDATA_F16"]


def activation_options(p: ConvProblem) -> list[str]:
    act = p.activation
    if act is None:
        return ["-DACT=0"]
    return [f"-DACT={ACTIVATION_IDS[act.kind]}", f"-DACT_A={float_literal(act.a)}",
            f"-DACT_B={float_literal(act.b)}"]


def geometry_options(p: ConvProblem) -> list[str]:
    return [f"-DKH={p.kh}", f"-DKW={p.kw}", f"-DSY={p.stride[0]}", f"-DSX={p.stride[1]}",
            f"-DDY={p.dilation[0]}", f"-DDX={p.dilation[1]}"]


def config_id(kernel: str, p: ConvProblem, options: list[str], extents: list[int]) -> str:
    """The tuner's configuration id, as ACL's: kernel name, dtype, the options that shape
    the work (not the bias or activation of the epilogue, as in ACL) and the extents passed
    as arguments, joined by "_"."""
    opts = [o[2:].replace("=", "") for o in options
            if o.startswith("-D") and not o.startswith(_EPILOGUE_OPTIONS)]
    text = "_".join([kernel, p.dtype, *opts, *(str(e) for e in extents)])
    return "".join(ch if ch.isalnum() or ch in "_.-+" else "-" for ch in text)
