"""Flags that describe one ConvProblem, shared by every command that takes a problem."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from ..problem import ConvProblem


def _ints(what: str, counts: tuple[int, ...]) -> Callable[[str], tuple[int, ...]]:
    """A parser of ``counts`` integers separated by ``x`` or ``,``: every part must be an
    integer, so ``3x`` or ``1,,2`` is an error rather than a guess."""
    def parse(text: str) -> tuple[int, ...]:
        parts = re.split(r"[x,]", text.strip().lower())
        if len(parts) not in counts or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts):
            raise argparse.ArgumentTypeError(
                f"expected {what}, got {text!r}")
        return tuple(int(p) for p in parts)
    return parse


def add_problem_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    g = parser.add_argument_group("problem (logical sizes, whatever the layout)")
    for name, help_text in [("n", "batch"), ("h", "input height"), ("w", "input width"),
                            ("c", "input channels"), ("k", "output channels")]:
        g.add_argument(f"--{name}", type=int, required=required and name != "n",
                       default=1 if name == "n" else None, help=help_text)
    g.add_argument("--kernel", type=_ints("K or KHxKW such as 3 or 1x7", (1, 2)),
                   required=required, metavar="KHxKW",
                   help="kernel size: 3 or 3x3 or 1x7")
    g.add_argument("--stride", type=_ints("S or SY,SX such as 2 or 2,1", (1, 2)),
                   default=(1,), metavar="S|SY,SX",
                   help="stride (default 1)")
    g.add_argument("--pad", type=_ints("P, PY,PX or T,B,L,R such as 1 or 0,0,3,3", (1, 2, 4)),
                   default=(0,), metavar="P|PY,PX|T,B,L,R",
                   help="zero padding (default 0)")
    g.add_argument("--dilation", type=_ints("D or DY,DX such as 2", (1, 2)),
                   default=(1,), metavar="D|DY,DX",
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
