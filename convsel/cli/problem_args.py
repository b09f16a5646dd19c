"""Flags that describe one ConvProblem, shared by every command that takes a problem."""

from __future__ import annotations

import argparse
from typing import Any

from ..problem import ConvProblem


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1 or 1,1, got {text!r}")


def add_problem_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    g = parser.add_argument_group("problem (logical sizes, whatever the layout)")
    for name, help_text in [("n", "batch"), ("h", "input height"), ("w", "input width"),
                            ("c", "input channels"), ("k", "output channels")]:
        g.add_argument(f"--{name}", type=int, required=required and name != "n",
                       default=1 if name == "n" else None, help=help_text)
    g.add_argument("--kernel", type=_ints, required=required, metavar="KHxKW",
                   help="kernel size: 3 or 3x3 or 1x7")
    g.add_argument("--stride", type=_ints, default=(1,), metavar="S|SY,SX",
                   help="stride (default 1)")
    g.add_argument("--pad", type=_ints, default=(0,), metavar="P|PY,PX|T,B,L,R",
                   help="zero padding (default 0)")
    g.add_argument("--dilation", type=_ints, default=(1,), metavar="D|DY,DX",
                   help="dilation (default 1)")
    g.add_argument("--groups", type=int, default=1, help="groups (C for depthwise)")
    g.add_argument("--dtype", default="F32", help="F32, F16, QASYMM8, QASYMM8_SIGNED")
    g.add_argument("--layout", default="NHWC", help="NHWC or NCHW")
    g.add_argument("--fast-math", action="store_true", help="ACL's enable_fast_math")
    g.add_argument("--activation", default=None,
                   help="fused activation: relu, bounded_relu(6), ... (default none)")


def _one_or_pair(values: tuple[int, ...]) -> Any:   # ConvProblem normalises int, pair, 4-tuple
    return values[0] if len(values) == 1 else values


def problem_from_args(args: argparse.Namespace) -> ConvProblem:
    kernel = args.kernel if len(args.kernel) == 2 else args.kernel * 2
    return ConvProblem(n=args.n, h=args.h, w=args.w, c=args.c, k=args.k, kh=kernel[0],
                       kw=kernel[1], stride=_one_or_pair(args.stride),
                       pad=_one_or_pair(args.pad), dilation=_one_or_pair(args.dilation),
                       groups=args.groups, dtype=args.dtype, layout=args.layout,
                       fast_math=args.fast_math, activation=args.activation)
