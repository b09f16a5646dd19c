"""The generated Winograd transforms: exact in float64, small error in float32, and present
for every (kernel, tile) pair the heuristics can select."""

from __future__ import annotations

import numpy as np
import pytest

from convsel.rules import default_rules
from convsel.winograd_transforms import (
    winograd_kron_2d,
    winograd_matrices,
    winograd_matrices_2d,
)


def _selectable_pairs() -> list[tuple[tuple[int, int], tuple[int, int]]]:
    rules = default_rules()
    entries = [e for rows in rules.cpu.winograd.values() for e in rows]
    entries += [e for rows in rules.gpu.winograd.pairs.values() for e in rows]
    return sorted({(tuple(e.kernel), tuple(e.tile)) for e in entries})


PAIRS = _selectable_pairs()


def f32_rms_bound(tile, kernel) -> float:
    """float32 relative RMS error bound: 8-point axes in both directions (F(4x4, 5x5) and
    F(2x2, 7x7), fast-math-only pairs in ACL) amplify rounding ~10x over the rest."""
    n = (tile[0] + kernel[0] - 1, tile[1] + kernel[1] - 1)
    return 5e-6 if min(n) >= 8 else 1e-6


def _correlate_2d(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(d, g.shape[-2:], axis=(-2, -1))
    return np.einsum("tijab,tab->tij", windows, g)


def _winograd_2d(tile, kernel, d, g, dtype):
    at, gm, bt = (m.astype(dtype) for m in winograd_kron_2d(tile, kernel))
    u = g.reshape(len(g), -1).astype(dtype) @ gm.T
    v = d.reshape(len(d), -1).astype(dtype) @ bt.T
    return ((u * v) @ at.T).reshape(len(d), *tile)


def test_every_documented_pair_is_selectable() -> None:
    kernels = {k for k, _ in PAIRS}
    for kernel in [(3, 3), (5, 5), (7, 7), (1, 3), (3, 1), (1, 5), (5, 1), (1, 7), (7, 1)]:
        assert kernel in kernels


@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (6, 3), (2, 5), (4, 5), (2, 7), (1, 1)])
def test_1d_is_exact_in_float64(m: int, r: int) -> None:
    at, g, bt = winograd_matrices(m, r)
    assert at.shape == (m, m + r - 1) and g.shape == (m + r - 1, r) and bt.shape == (m + r - 1,) * 2
    rng = np.random.default_rng(m * 10 + r)
    d, w = rng.standard_normal(m + r - 1), rng.standard_normal(r)
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel,tile", PAIRS, ids=[f"F{t}x{k}" for k, t in PAIRS])
def test_2d_pair_exact_in_float64_and_accurate_in_float32(kernel, tile) -> None:
    rng = np.random.default_rng(sum(kernel) * 7 + sum(tile))
    n_in = (tile[0] + kernel[0] - 1, tile[1] + kernel[1] - 1)
    d = rng.standard_normal((500, *n_in))
    g = rng.standard_normal((500, *kernel))
    ref = _correlate_2d(d, g)
    np.testing.assert_allclose(_winograd_2d(tile, kernel, d, g, np.float64), ref,
                               rtol=0, atol=1e-11)
    y32 = _winograd_2d(tile, kernel, d, g, np.float32)
    rms = np.sqrt(np.mean((y32 - ref) ** 2) / np.mean(ref ** 2))
    assert rms < f32_rms_bound(tile, kernel), (
        f"F({tile}, {kernel}) float32 relative RMS error {rms:.2e}")


def test_2d_matches_per_axis_form() -> None:
    (at_y, g_y, bt_y), (at_x, g_x, bt_x) = winograd_matrices_2d((4, 4), (3, 3))
    rng = np.random.default_rng(1)
    d, g = rng.standard_normal((6, 6)), rng.standard_normal((3, 3))
    per_axis = at_y @ ((g_y @ g @ g_x.T) * (bt_y @ d @ bt_x.T)) @ at_x.T
    np.testing.assert_allclose(per_axis, _correlate_2d(d[None], g[None])[0], atol=1e-12)


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="m=0"):
        winograd_matrices(0, 3)
    with pytest.raises(ValueError, match="exceeds"):
        winograd_matrices(20, 3)
    with pytest.raises(ValueError, match="1-wide"):
        winograd_matrices_2d((2, 2), (1, 3))


def test_matrices_are_read_only() -> None:
    at, _, _ = winograd_matrices(4, 3)
    with pytest.raises(ValueError):
        at[0, 0] = 1.0
