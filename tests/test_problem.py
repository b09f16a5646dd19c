"""ConvProblem: normalisation, derived sizes, JSON round trip, and a clear error per bad field."""

import math

import pytest

from convsel import Activation, ConvProblem, InvalidProblemError


def test_defaults_and_normalisation():
    p = ConvProblem(1, 56, 56, 64, 64, 3, 3)
    assert (p.stride, p.pad, p.dilation, p.groups) == ((1, 1), (0, 0, 0, 0), (1, 1), 1)
    assert (p.dtype, p.layout, p.fast_math, p.activation) == ("F32", "NHWC", False, None)
    q = ConvProblem(1, 56, 56, 64, 64, 3, 3, stride=2, pad=(1, 2), dilation=[1, 1],
                    dtype="float16", layout="nchw", activation="bounded_relu(6)")
    assert q.stride == (2, 2) and q.pad == (1, 1, 2, 2) and q.dtype == "F16"
    assert q.layout == "NCHW" and q.activation == Activation("bounded_relu", 6.0, 0.0)


@pytest.mark.parametrize("kwargs,out", [
    (dict(pad=1), (56, 56)),
    (dict(stride=2, pad=1), (28, 28)),
    (dict(stride=2, pad=(0, 1, 0, 1)), (28, 28)),
    (dict(pad=2, dilation=2), (56, 56)),
    (dict(pad=(0, 0, 1, 1)), (54, 56)),
])
def test_output_shape(kwargs, out):
    p = ConvProblem(2, 56, 56, 64, 32, 3, 3, **kwargs)
    assert (p.out_h, p.out_w) == out
    assert p.output_shape == (2, *out, 32)
    assert p.replace(layout="NCHW").output_shape == (2, 32, *out)


def test_round_trip_and_hash():
    p = ConvProblem(1, 17, 17, 128, 192, 1, 7, pad=(0, 0, 3, 3), groups=2, dtype="F16",
                    layout="NCHW", fast_math=True, activation="lu_bounded_relu(6, -1)")
    q = ConvProblem.from_dict(p.to_dict())
    assert q == p and hash(q) == hash(p)
    assert ConvProblem.from_dict({**p.to_dict(), "activation": "lu_bounded_relu(6,-1)"}) == p


@pytest.mark.parametrize("field,value,words", [
    ("h", 0, "sizes must be >= 1"),
    ("c", -3, "sizes must be >= 1"),
    ("k", 2.5, "must be an integer"),
    ("kh", True, "must be an integer"),
    ("stride", 0, "strides must be >= 1"),
    ("stride", (1, 2, 3), "pair"),
    ("dilation", (0, 1), "dilations must be >= 1"),
    ("pad", -1, "pads must be >= 0"),
    ("pad", 3, "smaller than the dilated kernel extent"),
    ("pad", math.nan, "expected an int"),
    ("pad", (1, 1, 1), "(top, bottom, left, right)"),
    ("groups", 3, "divide c=64 and k=64"),
    ("groups", 0, "divide"),
    ("dtype", "BF16", "unknown dtype"),
    ("layout", "NHCW", "unknown layout"),
    ("fast_math", "yes", "true or false"),
    ("activation", "gelu", "unknown activation kind"),
    ("activation", "bounded_relu(a)", "must be a number"),
    ("activation", "relu(1)", "takes 0 parameter"),
    ("activation", {"kind": "relu", "x": 1}, "unknown keys"),
    ("activation", "lu_bounded_relu(1, 2)", "b <= upper bound a"),
])
def test_bad_fields_name_field_value_and_rule(field, value, words):
    fields = dict(n=1, h=56, w=56, c=64, k=64, kh=3, kw=3)
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem(**{**fields, field: value})
    assert info.value.field == field
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_output_that_vanishes():
    with pytest.raises(InvalidProblemError, match="output would be empty") as info:
        ConvProblem(1, 2, 2, 8, 8, 5, 5)
    assert info.value.field == "h/w"


def test_from_dict_errors():
    with pytest.raises(InvalidProblemError, match="unknown field"):
        ConvProblem.from_dict({"n": 1, "h": 8, "w": 8, "c": 8, "k": 8, "kh": 3, "kw": 3,
                               "strides": 1})
    with pytest.raises(InvalidProblemError, match="required field is missing") as info:
        ConvProblem.from_dict({"n": 1, "h": 8, "w": 8, "c": 8, "k": 8, "kh": 3})
    assert info.value.field == "kw"
    with pytest.raises(InvalidProblemError, match="JSON object"):
        ConvProblem.from_dict([1, 2])


def test_activation_definitions():
    import numpy as np

    x = np.array([-2.0, -0.5, 0.0, 0.5, 8.0])
    assert np.allclose(Activation("bounded_relu", 6).apply(x), [0, 0, 0, 0.5, 6])
    assert np.allclose(Activation("lu_bounded_relu", 1, -1).apply(x), [-1, -0.5, 0, 0.5, 1])
    assert np.allclose(Activation("leaky_relu", 0.1).apply(x), [-0.2, -0.05, 0, 0.5, 8])
    assert np.allclose(Activation("hard_swish").apply(x), x * np.clip(x + 3, 0, 6) / 6)
