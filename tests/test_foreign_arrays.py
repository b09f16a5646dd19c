"""Arrays of other libraries at conv2d's door (issue 25, item 17), and float64 input said
rather than silently returned as float32 (item 19).

PyTorch, JAX and CuPy are not installed here, so the DLPack and ``__array__`` paths are driven
by small array types defined below that speak the protocols through numpy's own producer (this
module is their "library": it has ``from_dlpack``, as torch does); the PyTorch test runs where
torch is installed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import convsel
from convsel import ConversionWarning, ConvProblem, InvalidProblemError

P = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1)
RNG = np.random.default_rng(0)
X = RNG.standard_normal(P.input_shape).astype(np.float32)
W = RNG.standard_normal(P.weights_shape).astype(np.float32)
B = RNG.standard_normal(P.k).astype(np.float32)


class HostTensor:
    """A CPU tensor of another library: DLPack only, its memory numpy's."""

    def __init__(self, data: np.ndarray):
        self.data = data

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


def from_dlpack(obj) -> HostTensor:
    """This module's from_dlpack, as torch.from_dlpack: wrap without a copy."""
    return HostTensor(np.from_dlpack(obj))


class DeviceTensor(HostTensor):
    """A tensor on a GPU (kDLCUDA) whose producer copies to the host when asked to."""

    def __dlpack__(self, *, dl_device=None, copy=None, **kwargs):
        if dl_device != (1, 0) or not copy:
            raise BufferError("the tensor is on cuda:0")
        return self.data.copy().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (2, 0)


class StuckOnDevice(DeviceTensor):
    """A GPU tensor that can neither be exported to the host nor converted."""

    def __dlpack__(self, **kwargs):
        raise BufferError("the tensor is on cuda:0")

    def __array__(self, *args, **kwargs):
        raise TypeError("implicit conversion to a host NumPy array is not allowed")


class ArrayOnly:
    """A library without DLPack, readable through __array__ (as many older ones)."""

    def __init__(self, data: np.ndarray):
        self.data = data

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)


def expected() -> np.ndarray:
    return convsel.conv2d(X, W, B, pad=1)


def test_a_dlpack_tensor_in_gives_one_back_without_a_copy():
    with pytest.warns(ConversionWarning) as said:
        y = convsel.conv2d(HostTensor(X), HostTensor(W), HostTensor(B), pad=1)
    assert isinstance(y, HostTensor)
    np.testing.assert_array_equal(y.data, expected())
    text = str(said[0].message)
    assert "x (test_foreign_arrays.HostTensor) read through DLPack without a copy" in text
    assert "w (" in text and "bias (" in text
    assert "the result is a test_foreign_arrays.HostTensor" in text


def test_a_device_tensor_is_copied_to_the_host_and_numpy_comes_back():
    with pytest.warns(ConversionWarning, match="copied to the host through DLPack"):
        y = convsel.conv2d(DeviceTensor(X), W, B, pad=1)
    assert isinstance(y, np.ndarray)          # back to the device would be a copy: said
    np.testing.assert_array_equal(y, expected())


def test_an_array_only_library_is_read_through_array():
    with pytest.warns(ConversionWarning, match="read through __array__.*numpy.ndarray"):
        y = convsel.conv2d(ArrayOnly(X), ArrayOnly(W), pad=1)
    np.testing.assert_array_equal(y, convsel.conv2d(X, W, pad=1))


def test_what_cannot_reach_the_host_is_refused_with_the_way_out():
    with pytest.raises(InvalidProblemError) as info:
        convsel.conv2d(StuckOnDevice(X), W, pad=1)
    assert info.value.field == "x" and "StuckOnDevice" in info.value.value
    assert ".detach().cpu()" in info.value.rule and ".get()" in info.value.rule


def test_prepared_runs_take_them_too():
    with pytest.warns(ConversionWarning, match="w .* read through DLPack"):
        op = convsel.prepare(P, HostTensor(W), B)
    with pytest.warns(ConversionWarning):
        y = op.run(HostTensor(X))
    assert isinstance(y, HostTensor)
    np.testing.assert_array_equal(y.data, expected())


def test_float64_input_says_it_returns_float32():
    with pytest.warns(ConversionWarning, match="x is float64: convsel computes in float32"):
        y = convsel.conv2d(X.astype(np.float64), W, B, pad=1)
    assert y.dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConversionWarning)
        convsel.conv2d(X, W, B, pad=1)                     # numpy float32: nothing to say


def test_pytorch_tensors_run_and_come_back_as_tensors():
    torch = pytest.importorskip("torch", reason="the torch test needs torch (convsel[bench])")
    import torch.nn.functional as F

    x = torch.randn(1, 8, 16, 16)
    w, b = torch.randn(4, 8, 3, 3), torch.randn(4)
    with pytest.warns(ConversionWarning):
        y = convsel.conv2d(x, w, b, pad=1, layout="NCHW", weights_layout="OIHW")
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, F.conv2d(x, w, b, padding=1), rtol=1e-4, atol=1e-4)
    with pytest.raises(InvalidProblemError, match="detach"):
        convsel.conv2d(x.requires_grad_(), w, b, pad=1, layout="NCHW", weights_layout="OIHW")
