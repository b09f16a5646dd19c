"""Generated conv shapes for training a cost model: what real networks use, and what they
could use, in random mixes.

A shape is first given a *kind*, from :data:`KINDS` (weights in brackets):

- ``net`` (40%): the marginals of the conv layers of common image networks (ResNet, VGG,
  MobileNet, Inception, SqueezeNet, YOLO, U-Net, SR nets): channels multiples of 8 or 16 from
  3 to 2048, mostly 1x1 and 3x3 kernels, strides 1 or 2, "same" padding, a tenth depthwise;
- ``few-channel`` (10%): 1-4 input channels (image stems, masks, depth maps, audio
  spectrograms), any kernel up to 11x11, square or rectangular, large maps;
- ``grouped`` (10%): 2-64 groups (ResNeXt, ShuffleNet, RegNet), 4-64 channels per group;
- ``depthwise`` (10%): one channel per group, 3x3, 5x5 or 7x7 (MobileNet, EfficientNet,
  ConvNeXt), channel multiplier 1 or 2;
- ``rectangular`` (8%): 1xN and Nx1 kernels, N from 2 to 11 (Inception, audio, text);
- ``strided`` (6%): strides 2, 3 or 4 with kernels 1 to 11 (stems, patchify layers);
- ``dilated`` (6%): dilation 2, 3 or 4 (DeepLab, WaveNet-like), 3x3 or 5x5;
- ``tiny-map`` (5%): 1x1 to 7x7 maps with 1024-4096 channels (the ends of classifiers);
- ``large-map`` (5%): 96x96 to 384x384 maps with 1-16 channels (segmentation, SR heads).

Batch is drawn from 1 to 64 (mostly 1), padding is "same" for 85% of shapes. A shape is kept
only when it is valid and its work is within ``max_flops`` (so one shape never costs minutes
on a CPU), and never twice. The same seed gives the same shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
BATCH: Sequence[tuple[int, float]] = ((1, 8), (2, 1), (4, 1), (8, 0.7), (16, 0.4), (32, 0.3),
                                      (64, 0.2))
STRIDES: Sequence[tuple[int, float]] = ((1, 8), (2, 2.5), (4, 0.2))
DEPTHWISE_SHARE = 0.12
GROUPED_SHARE = 0.04
DILATED_SHARE = 0.04
VALID_PAD_SHARE = 0.15
MAX_FLOPS = 1.5e9


def _draw(rng: np.random.Generator, table: Sequence[tuple[T, float]]) -> T:
    weights = np.array([w for _, w in table], dtype=float)
    return table[int(rng.choice(len(table), p=weights / weights.sum()))][0]


def _pick(rng: np.random.Generator, values: Sequence[int]) -> int:
    return int(values[int(rng.integers(len(values)))])


def _problem(rng: np.random.Generator, size: int, c: int, k: int, kernel: tuple[int, int],
             stride: int = 1, dilation: int = 1, groups: int = 1,
             n: int | None = None) -> ConvProblem:
    kh, kw = kernel
    same = rng.random() >= VALID_PAD_SHARE
    pad_h = dilation * (kh - 1) // 2 if same else 0
    pad_w = dilation * (kw - 1) // 2 if same else 0
    return ConvProblem(n=n if n is not None else _draw(rng, BATCH), h=size, w=size, c=c, k=k,
                       kh=kh, kw=kw, stride=(stride, stride), pad=(pad_h, pad_h, pad_w, pad_w),
                       dilation=(dilation, dilation), groups=groups)


def _net(rng: np.random.Generator) -> ConvProblem:
    """The nets' own marginals (as every sample was drawn before the broad kinds)."""
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
    return _problem(rng, size, c, k, (kh, kw), stride, dilation, groups,
                    n=_draw(rng, BATCH[:4]))


_ODD = (1, 3, 5, 7, 9, 11)
_MAPS = (7, 14, 16, 28, 32, 56, 64, 112, 128, 224)


def _few_channel(rng: np.random.Generator) -> ConvProblem:
    side = _pick(rng, _ODD)
    kernel = (side, side) if rng.random() < 0.6 else (
        (1, side) if rng.random() < 0.5 else (side, 1))
    return _problem(rng, _pick(rng, (16, 32, 64, 96, 128, 224, 256)), _pick(rng, (1, 2, 3, 4)),
                    _pick(rng, (8, 16, 32, 64, 96, 128)), kernel, _pick(rng, (1, 1, 2, 4)))


def _grouped(rng: np.random.Generator) -> ConvProblem:
    groups = _pick(rng, (2, 4, 8, 16, 32, 64))
    per_in, per_out = _pick(rng, (4, 8, 16, 32, 64)), _pick(rng, (4, 8, 16, 32, 64))
    return _problem(rng, _pick(rng, _MAPS), groups * per_in, groups * per_out,
                    _draw(rng, (((3, 3), 6), ((1, 1), 3), ((5, 5), 1))),
                    _pick(rng, (1, 1, 1, 2)), groups=groups)


def _depthwise(rng: np.random.Generator) -> ConvProblem:
    c = _pick(rng, (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024))
    side = _pick(rng, (3, 5, 7))
    return _problem(rng, _pick(rng, _MAPS), c, c * _pick(rng, (1, 1, 1, 2)), (side, side),
                    _pick(rng, (1, 1, 2)), groups=c)


def _rectangular(rng: np.random.Generator) -> ConvProblem:
    n = int(rng.integers(2, 12))
    kernel = (1, n) if rng.random() < 0.5 else (n, 1)
    return _problem(rng, _pick(rng, _MAPS), int(_draw(rng, CHANNELS)),
                    int(_draw(rng, CHANNELS[1:])), kernel)


def _strided(rng: np.random.Generator) -> ConvProblem:
    side = _pick(rng, (1, 2, 3, 4, 5, 7, 8, 11))
    return _problem(rng, _pick(rng, (28, 32, 56, 64, 112, 128, 224)),
                    int(_draw(rng, CHANNELS)), int(_draw(rng, CHANNELS[1:])), (side, side),
                    _pick(rng, (2, 3, 4)))


def _dilated(rng: np.random.Generator) -> ConvProblem:
    side = _pick(rng, (3, 3, 5))
    return _problem(rng, _pick(rng, (14, 28, 32, 56, 64, 65, 129)), int(_draw(rng, CHANNELS)),
                    int(_draw(rng, CHANNELS[1:])), (side, side),
                    dilation=_pick(rng, (2, 3, 4)))


def _tiny_map(rng: np.random.Generator) -> ConvProblem:
    size = int(rng.integers(1, 8))
    kernel = (1, 1) if size < 3 or rng.random() < 0.6 else (3, 3)
    return _problem(rng, size, _pick(rng, (1024, 1280, 1536, 2048, 3072, 4096)),
                    _pick(rng, (256, 512, 1000, 1024, 2048, 4096)), kernel)


def _large_map(rng: np.random.Generator) -> ConvProblem:
    side = _pick(rng, (1, 3, 3, 5, 7))
    return _problem(rng, _pick(rng, (96, 128, 192, 256, 320, 384)),
                    _pick(rng, (1, 2, 3, 4, 8, 12, 16)), _pick(rng, (1, 3, 4, 8, 12, 16, 32)),
                    (side, side), n=_pick(rng, (1, 1, 1, 2)))


# name -> (weight, draw): the documented space (see the module docstring)
KINDS: dict[str, tuple[float, Callable[[np.random.Generator], ConvProblem]]] = {
    "net": (0.40, _net), "few-channel": (0.10, _few_channel), "grouped": (0.10, _grouped),
    "depthwise": (0.10, _depthwise), "rectangular": (0.08, _rectangular),
    "strided": (0.06, _strided), "dilated": (0.06, _dilated), "tiny-map": (0.05, _tiny_map),
    "large-map": (0.05, _large_map)}


def sample_problem(rng: np.random.Generator) -> ConvProblem:
    """One shape of a random kind (may be invalid: :func:`sample_problems` retries)."""
    draw = _draw(rng, [(f, w) for w, f in KINDS.values()])
    return draw(rng)


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
