"""The correctness suite again, on the numpy backend's fused paths (the ``cpu`` extra).

tests/algorithms/test_correctness.py runs every (algorithm, backend) pair against the
float64 reference with NaN-filled outputs, on the shipped nets' layers (F32 and F16), on
hypothesis's random problems, through the public path with every activation, and with NaN
and Inf in the input. Here the same test functions run again for every numpy algorithm with
the fused kernels switched on (numba installed), with the same tolerances; where numba is
not installed these tests skip and that file's run is the pure numpy one.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import numpy as np
import pytest
from repo import ROOT

from convsel import backends
from convsel.backends.numpy import accel
from convsel.backends.numpy import common as numpy_common

pytest.importorskip("numba", reason="the fused kernels need the cpu extra (numba)")

NUMPY_ALGORITHMS = sorted(a for (a, b) in backends.IMPLEMENTATIONS if b == "numpy")


def _suite() -> ModuleType:
    """tests/algorithms/test_correctness.py, loaded under its own name (its tests are not
    collected a second time: only the wrappers below are)."""
    path = ROOT / "tests" / "algorithms" / "test_correctness.py"
    spec = importlib.util.spec_from_file_location("correctness_suite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


SUITE = _suite()


@pytest.fixture(autouse=True)
def _fused_and_nan_filled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)
    monkeypatch.setattr(accel, "_wanted", True)
    assert accel.enabled()


def _prepared_fused(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every numpy kernel prepared, to check that the fused path was taken."""
    seen: list[object] = []
    original = numpy_common.Prepared.__init__

    def recording(self: numpy_common.Prepared, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        seen.append(self)

    monkeypatch.setattr(numpy_common.Prepared, "__init__", recording)
    return seen


@pytest.mark.parametrize("algorithm", NUMPY_ALGORITHMS)
def test_network_layers_f32_fused(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _prepared_fused(monkeypatch)
    SUITE.test_network_layers_f32(algorithm, "numpy")
    assert seen and all(getattr(k, "accelerated", False) for k in seen)


@pytest.mark.parametrize("algorithm", NUMPY_ALGORITHMS)
def test_network_layers_f16_fused(algorithm: str) -> None:
    SUITE.test_network_layers_f16(algorithm, "numpy")


@pytest.mark.parametrize("algorithm", NUMPY_ALGORITHMS)
def test_random_problems_fused(algorithm: str) -> None:
    SUITE.test_random_problems(algorithm, "numpy")


@pytest.mark.filterwarnings("error::convsel.errors.FallbackWarning")
@pytest.mark.parametrize("algorithm", NUMPY_ALGORITHMS)
def test_public_path_layouts_bias_and_activations_fused(algorithm: str) -> None:
    SUITE.test_public_path_layouts_bias_and_activations(algorithm, "numpy")


@pytest.mark.parametrize("algorithm", NUMPY_ALGORITHMS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_propagates_fused(algorithm: str, bad: float) -> None:
    SUITE.test_non_finite_input_propagates(algorithm, "numpy", bad)
