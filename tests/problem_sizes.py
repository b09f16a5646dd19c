"""How big the correctness suite's problems are, per backend: the ONE place to shrink them
(the OpenCL backend on PoCL compiles and runs far slower than numpy)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    max_hw: int            # layers.json spatial sizes are cut to this (parity kept)
    max_channels: int      # ... and channel counts to this (ratio C:K kept)
    batch: int             # images per layer case (batch > 1 everywhere)
    layer_stride: int      # run every n-th distinct scaled layer (1 = all)
    f16_layer_stride: int  # the same, for the F16 pass
    max_examples: int      # hypothesis examples per (algorithm, backend)
    max_random_hw: int     # hypothesis spatial bound
    max_random_channels: int


SIZES: dict[str, Sizes] = {
    "numpy": Sizes(max_hw=14, max_channels=24, batch=2, layer_stride=1, f16_layer_stride=3,
                   max_examples=40, max_random_hw=12, max_random_channels=8),
    "opencl": Sizes(max_hw=10, max_channels=16, batch=2, layer_stride=3, f16_layer_stride=9,
                    max_examples=12, max_random_hw=9, max_random_channels=6),
}
DEFAULT = SIZES["opencl"]   # a backend not listed gets the cautious sizes


def sizes(backend: str) -> Sizes:
    return SIZES.get(backend, DEFAULT)
