"""The layers of the packaged layers.json (convsel/data), scaled down to CI size.

Kernel, stride, padding, dilation and the grouping (dense, depthwise with its multiplier,
grouped) are kept; large spatial sizes and channel counts are cut, keeping the spatial
parity and the C:K ratio.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from convsel.problem import ConvProblem
from convsel.tuning.layers import default_layer_file

LAYERS_JSON = default_layer_file()


@lru_cache(maxsize=1)
def raw_layers() -> list[dict[str, Any]]:
    """Every layer; a missing file is an error, never an empty parameter list."""
    layers = json.loads(LAYERS_JSON.read_text())
    assert layers, f"{LAYERS_JSON} holds no layer"
    return layers


def _spatial(size: int, cap: int, extent: int) -> int:
    if size <= cap:
        return size
    return max(cap + (size - cap) % 4, extent)   # size mod 4 kept: stride-2 edge cases


def _channels(c: int, k: int, cap: int) -> tuple[int, int]:
    """Shrink (c, k) under ``cap`` by one factor; small counts (RGB in, few out) are kept."""
    f = max(1, math.ceil(max(c, k) / cap))
    small = min(8, cap)
    return (c if c <= small else max(small, math.ceil(c / f)),
            k if k <= small else max(small, math.ceil(k / f)))


def scaled(layer: dict[str, Any], max_hw: int, max_channels: int, batch: int) -> ConvProblem:
    c, k, g = layer["c"], layer["k"], layer["groups"]
    dy, dx = layer["dilation"] if isinstance(layer["dilation"], list) else (layer["dilation"],) * 2
    ext_h, ext_w = dy * (layer["kh"] - 1) + 1, dx * (layer["kw"] - 1) + 1
    if g == 1:
        c, k = _channels(c, k, max_channels)
    elif g == c:   # depthwise: channels and groups shrink together, multiplier kept
        mult = k // c
        g = c = _channels(c, c, max_channels)[0]
        k = c * mult
    else:          # grouped: at most 4 groups, each group's C:K shape kept
        g = min(g, 4)
        cg, kg = _channels(c // layer["groups"], k // layer["groups"], max_channels // g)
        c, k = cg * g, kg * g
    return ConvProblem(batch, _spatial(layer["h"], max_hw, ext_h), _spatial(layer["w"], max_hw,
                       ext_w), c, k, layer["kh"], layer["kw"], stride=tuple(layer["stride"]),
                       pad=tuple(layer["pad"]), dilation=(dy, dx), groups=g)


def layer_cases(max_hw: int, max_channels: int, batch: int, every: int = 1,
                ) -> list[tuple[str, ConvProblem]]:
    """(id, problem) for each distinct scaled layer, every ``every``-th of them."""
    seen: dict[ConvProblem, str] = {}
    for layer in raw_layers():
        p = scaled(layer, max_hw, max_channels, batch)
        seen.setdefault(p, f"{layer['net']}/{layer['name']}")
    return [(name, p) for p, name in list(seen.items())[::every]]
