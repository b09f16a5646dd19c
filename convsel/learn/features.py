"""What a cost model sees of one candidate: the problem's sizes and work, the algorithm and its
variant parameters, and what that algorithm moves through memory.

One row per (problem, algorithm, params): the problem's features, a one-hot of the algorithm
over the registry, and the algorithm's own part, which its home computes (the ``features``
hook of :class:`convsel.algorithms.spec.AlgorithmSpec`, names in
:data:`convsel.algorithms.cost.CANDIDATE_FEATURES`); this module knows no algorithm by name.
Every feature is a plain float computed from the problem alone, so a model trained on one
machine's timings can rank candidates of any shape. The names are stored with the model: a
model whose feature list differs from this code's is refused, not silently misread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..algorithms import ALGORITHMS, spec
from ..algorithms.cost import CANDIDATE_FEATURES, moved_bytes
from ..problem import ConvProblem

# 2: the tiled GEMM's work-group tile, its count and fill; 3: the matrix products each
# algorithm reduces the convolution to (sizes, count, arithmetic per element); 4: a depthwise
# direct convolution as one reduction over taps per output (not a product per channel and tap);
# 5: per backend (a row describes the candidate as that backend's kernel runs it): OpenCL's
# grouped direct convolution as one product per group reducing over channels x taps; 6: a
# named split-K factor (split_k; the work-groups it launches counted in log_workgroups)
FEATURES_VERSION = "6"


def problem_features(p: ConvProblem) -> dict[str, float]:
    w_bytes = p.k * p.kh * p.kw * (p.c // p.groups) * p.element_size
    moved = moved_bytes(p)
    return {
        "n": p.n, "h": p.h, "w": p.w, "c": p.c, "k": p.k, "kh": p.kh, "kw": p.kw,
        "stride_y": p.stride[0], "stride_x": p.stride[1],
        "dilation_y": p.dilation[0], "dilation_x": p.dilation[1],
        "pad": sum(p.pad), "groups": p.groups, "depthwise": float(p.is_depthwise),
        "c_per_group": p.c // p.groups, "k_per_group": p.k // p.groups,
        "out_h": p.out_h, "out_w": p.out_w, "out_pixels": p.n * p.out_h * p.out_w,
        "log_flops": math.log10(max(p.flops, 1)), "log_bytes": math.log10(moved),
        "intensity": p.flops / moved, "log_weights_bytes": math.log10(w_bytes),
    }


def candidate_features(p: ConvProblem, algorithm: str,
                       params: Mapping[str, Any] | None = None,
                       backend: str = "") -> dict[str, float]:
    """The feature row of one candidate as ``backend``'s kernel runs it (see
    :data:`FEATURE_NAMES` for the order; ``""``: the description every backend shares)."""
    row = problem_features(p)
    row.update({f"alg_{a}": float(a == algorithm) for a in ALGORITHMS})
    part = spec(algorithm).features_on(p, params or {}, backend)
    if set(part) != set(CANDIDATE_FEATURES):
        raise ValueError(f"{algorithm}'s features hook must give exactly "
                         f"{', '.join(CANDIDATE_FEATURES)}; it gave {', '.join(part)}")
    row.update({name: part[name] for name in CANDIDATE_FEATURES})
    return {k: float(v) for k, v in row.items()}


FEATURE_NAMES: tuple[str, ...] = tuple(candidate_features(
    ConvProblem(1, 8, 8, 4, 4, 3, 3), ALGORITHMS[0]))
# A row of feature_matrix is built as [problem's, one-hot, candidate's] (the order of
# candidate_features' dict); _ORDER puts it in FEATURE_NAMES' order where that differs.
_PROBLEM_NAMES = tuple(problem_features(ConvProblem(1, 8, 8, 4, 4, 3, 3)))
_NATURAL = (*_PROBLEM_NAMES, *(f"alg_{a}" for a in ALGORITHMS), *CANDIDATE_FEATURES)
_ORDER = None if _NATURAL == FEATURE_NAMES else [_NATURAL.index(n) for n in FEATURE_NAMES]
_ONE_HOT = {a: [float(a == b) for b in ALGORITHMS] for a in ALGORITHMS}
_CANDIDATE_SET = frozenset(CANDIDATE_FEATURES)


def feature_matrix(p: ConvProblem,
                   candidates: Sequence[tuple[str, Mapping[str, Any] | None]],
                   backend: str = "") -> np.ndarray:
    """The rows of :func:`candidate_features` for each (algorithm, params) of ``p`` on
    ``backend``, in the order of :data:`FEATURE_NAMES`, as one C-contiguous float64 array:
    the problem's part is computed once for all of them (a query ranks every candidate of
    one problem)."""
    shared = [float(v) for v in problem_features(p).values()]
    rows = []
    for algorithm, params in candidates:
        part = spec(algorithm).features_on(p, params or {}, backend)
        if part.keys() != _CANDIDATE_SET:
            raise ValueError(f"{algorithm}'s features hook must give exactly "
                             f"{', '.join(CANDIDATE_FEATURES)}; it gave {', '.join(part)}")
        row = [*shared, *_ONE_HOT[algorithm], *[float(part[n]) for n in CANDIDATE_FEATURES]]
        rows.append(row if _ORDER is None else [row[i] for i in _ORDER])
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURE_NAMES))
