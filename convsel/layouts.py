"""Tensor layouts: moving NCHW activations and OIHW/HWIO weights to convsel's NHWC/OHWI."""

from __future__ import annotations

import numpy as np

WEIGHTS_LAYOUTS = ("OHWI", "HWIO", "OIHW")

# Axis order that takes each weights layout to OHWI (K, KH, KW, C/groups).
_TO_OHWI = {"OHWI": (0, 1, 2, 3), "HWIO": (3, 0, 1, 2), "OIHW": (0, 2, 3, 1)}


def weights_to_ohwi(w: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(w, _TO_OHWI[layout]))


def ohwi_shape(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int]:
    """The (K, KH, KW, C/groups) sizes of weights of ``shape`` stored in ``layout``."""
    order = _TO_OHWI[layout]
    return tuple(shape[a] for a in order)  # type: ignore[return-value]


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))


def nhwc_to_nchw(y: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(y, (0, 3, 1, 2)))
