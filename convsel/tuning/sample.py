"""Generated conv shapes for training a cost model: what real networks use, in random mixes.

The marginals below are read off the conv layers of common image networks (ResNet, VGG,
MobileNet, Inception, SqueezeNet, YOLO, U-Net, SR nets): channel counts are multiples of 8 or
16 from 3 to 2048, kernels are 1x1 and 3x3 mostly, then 5x5, 7x7 and the factorised 1xN/Nx1
of Inception; strides 1 or 2; "same" padding mostly; batch 1 mostly; a tenth depthwise.
A shape is drawn attribute by attribute and kept only when it is valid and its work is within
``max_flops`` (so one shape never costs minutes on a CPU). The same seed gives the same shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from ..errors import InvalidProblemError
from ..problem import ConvProblem
from .layers import Layer

# (value, weight): weights say how often real nets use each value, roughly
T = TypeVar("T")

CHANNELS: Sequence[tuple[int, float]] = (
    (3, 0.5), (16, 1), (24, 1), (32, 2), (48, 1), (64, 3), (96, 2), (128, 3), (144, 1),
    (160, 1), (192, 2), (256, 3), (320, 1), (384, 1), (512, 2), (576, 1), (768, 1), (960, 1),
    (1024, 1), (2048, 0.5))
KERNELS: Sequence[tuple[tuple[int, int], float]] = (
    ((1, 1), 8), ((3, 3), 8), ((5, 5), 1.5), ((7, 7), 1), ((1, 3), 0.5), ((3, 1), 0.5),
    ((1, 7), 0.7), ((7, 1), 0.7), ((1, 5), 0.3), ((5, 1), 0.3), ((11, 11), 0.2))
SPATIAL: Sequence[tuple[int, float]] = (
    (7, 2), (8, 1), (13, 1), (14, 2), (17, 1), (26, 1), (28, 2), (35, 1), (52, 1), (56, 2),
    (64, 1), (73, 0.5), (104, 0.5), (112, 1.5), (128, 0.5), (147, 0.3), (224, 0.7))
BATCH: Sequence[tuple[int, float]] = ((1, 8), (2, 1), (4, 1), (8, 0.5))
STRIDES: Sequence[tuple[int, float]] = ((1, 8), (2, 2.5), (4, 0.2))
DEPTHWISE_SHARE = 0.12
GROUPED_SHARE = 0.04
DILATED_SHARE = 0.04
VALID_PAD_SHARE = 0.15
MAX_FLOPS = 1.5e9


def _draw(rng: np.random.Generator, table: Sequence[tuple[T, float]]) -> T:
    weights = np.array([w for _, w in table], dtype=float)
    return table[int(rng.choice(len(table), p=weights / weights.sum()))][0]


def sample_problem(rng: np.random.Generator) -> ConvProblem:
    """One shape (may be invalid: :func:`sample_problems` retries)."""
    kh, kw = _draw(rng, KERNELS)
    size = int(_draw(rng, SPATIAL))
    c = int(_draw(rng, CHANNELS))
    k = int(_draw(rng, CHANNELS[1:]))
    stride = int(_draw(rng, STRIDES))
    groups, dilation = 1, 1
    kind = rng.random()
    if kind < DEPTHWISE_SHARE and c > 3:
        k, groups, (kh, kw) = c, c, ((3, 3) if rng.random() < 0.8 else (5, 5))
    elif kind < DEPTHWISE_SHARE + GROUPED_SHARE and c >= 32:
        groups = int(rng.choice([2, 4, 8, 32]))
        k = max(groups, k // groups * groups)
    elif kind < DEPTHWISE_SHARE + GROUPED_SHARE + DILATED_SHARE and (kh, kw) == (3, 3):
        dilation = int(rng.choice([2, 4]))
    if (kh, kw) == (1, 1) and rng.random() < 0.7:
        stride = 1   # strided 1x1 is the projection shortcut only
    same = rng.random() >= VALID_PAD_SHARE
    pad_h = dilation * (kh - 1) // 2 if same else 0
    pad_w = dilation * (kw - 1) // 2 if same else 0
    return ConvProblem(n=_draw(rng, BATCH), h=size, w=size, c=c, k=k, kh=kh, kw=kw,
                       stride=(stride, stride), pad=(pad_h, pad_h, pad_w, pad_w),
                       dilation=(dilation, dilation), groups=groups)


def sample_problems(count: int, seed: int = 0, *, max_flops: float = MAX_FLOPS,
                    exclude: Sequence[ConvProblem] = ()) -> list[ConvProblem]:
    """``count`` distinct valid shapes of at most ``max_flops``, the same for the same seed;
    ``exclude`` are shapes not to repeat (those already measured, say)."""
    if count < 0:
        raise InvalidProblemError("sample", count, "must be >= 0")
    rng = np.random.default_rng(seed)
    seen, out = set(exclude), list[ConvProblem]()
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 1000 * (count + 1):
            raise InvalidProblemError("max_flops", max_flops, "too small: no shape fits")
        try:
            p = sample_problem(rng)
        except InvalidProblemError:
            continue
        if p.flops > max_flops or p in seen:
            continue
        seen.add(p)
        out.append(p)
    return out


def sample_layers(count: int, seed: int = 0, *, max_flops: float = MAX_FLOPS) -> list[Layer]:
    """:func:`sample_problems` as layers of the pseudo-net ``sample-<seed>``."""
    return [Layer(f"sample-{seed}", f"#{i} {p}", p)
            for i, p in enumerate(sample_problems(count, seed, max_flops=max_flops))]
