"""THE table of convsel's algorithms: one home module per algorithm, listed here once.

Each home (``direct.py``, ``winograd.py``, ...) states everything about its algorithm that
is not backend code, as an :class:`~convsel.algorithms.spec.AlgorithmSpec`: ACL methods,
hard constraint, variants, per-backend workspace estimates, cost-model features, dominance,
correctness tolerance, display data. Every list elsewhere (ids, ACL method names, backend
implementations, timing order, report colours, service descriptions, tuning variants, the
tests' tables, the README's table) is derived from :data:`REGISTRY`. Adding an algorithm
means: its home, a line here, and one module per backend implementing it (+ its ``.cl``).
The order is the one-hot order of the cost models' features: append, do not reorder.
"""

from __future__ import annotations

from . import direct, fft, gemm_1x1, im2col_gemm, implicit_gemm, indirect_gemm, winograd
from .spec import AlgorithmSpec

REGISTRY: tuple[AlgorithmSpec, ...] = (
    direct.SPEC,
    gemm_1x1.SPEC,
    im2col_gemm.SPEC,
    implicit_gemm.SPEC,
    winograd.SPEC,
    indirect_gemm.SPEC,
    fft.SPEC,
)
