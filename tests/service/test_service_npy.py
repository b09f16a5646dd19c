"""service.npy: .npy in and out, never unpickling, limits checked before allocating."""

from __future__ import annotations

import base64
import pickle

import numpy as np
import pytest
from service_support import npy_bytes

from convsel.errors import InvalidProblemError
from service import npy
from service.errors import TooLargeError

LIMITS = npy.TensorLimits(max_elements=1 << 20, max_bytes=1 << 22)
UNPICKLED: list[str] = []


def record(message: str) -> None:
    UNPICKLED.append(message)


class Trap:
    """Unpickling this object calls record(): proof that decoding never unpickles."""

    def __reduce__(self):
        return (record, ("unpickled!",))


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.arange(6, dtype=np.float16),
    np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    np.arange(6, dtype=">f4").reshape(2, 3),
    np.array(3.5, dtype=np.float32),
    np.zeros((0, 4), dtype=np.int32),
    np.array([True, False]),
])
def test_round_trip(array):
    out = npy.decode_base64("x", npy.encode_base64(array), LIMITS)
    np.testing.assert_array_equal(out, array)
    assert out.dtype == array.dtype.newbyteorder("=") and out.dtype.isnative
    assert out.flags.c_contiguous and out.flags.writeable


def test_object_arrays_are_refused_without_unpickling():
    data = npy_bytes(np.array([Trap(), 1], dtype=object))
    with pytest.raises(InvalidProblemError, match="dtype refused") as info:
        npy.decode_bytes("w", data, LIMITS)
    assert info.value.field == "w" and UNPICKLED == []
    assert pickle.loads(pickle.dumps(Trap())) is None and UNPICKLED == ["unpickled!"]  # armed


@pytest.mark.parametrize("array", [
    np.zeros(3, dtype=[("a", "f4"), ("b", "i4")]),
    np.array(["text"]),
    np.zeros(2, dtype=np.complex64),
    np.zeros(2, dtype="datetime64[s]"),
])
def test_non_numeric_dtypes_are_refused(array):
    with pytest.raises(InvalidProblemError, match="dtype refused"):
        npy.decode_bytes("x", npy_bytes(array), LIMITS)


def test_limits_are_checked_from_the_header_before_allocating():
    huge = npy_bytes(np.zeros(4, dtype=np.float32)).replace(b"(4,)", b"(100000, 100000)")
    with pytest.raises(TooLargeError) as info:
        npy.decode_bytes("x", huge, LIMITS)
    assert info.value.field == "x" and info.value.value == 10**10
    small = npy.TensorLimits(max_elements=100, max_bytes=64)
    with pytest.raises(TooLargeError, match="bytes"):
        npy.decode_bytes("x", npy_bytes(np.zeros(20, dtype=np.float64)), small)
    with pytest.raises(TooLargeError, match="base64 length"):
        npy.decode_base64("x", "A" * 10_000, small)


@pytest.mark.parametrize("data, words", [
    (b"not an npy file at all", "not a .npy array"),
    (npy_bytes(np.zeros(4, dtype=np.float32))[:-3], "data bytes"),
    (npy_bytes(np.zeros(4, dtype=np.float32)) + b"\x00" * 4, "data bytes"),
    (npy_bytes(np.zeros(4, dtype=np.float32)).replace(b"\x01\x00", b"\x03\x00", 1),
     "format version"),
])
def test_malformed_npy(data, words):
    with pytest.raises(InvalidProblemError, match=words):
        npy.decode_bytes("bias", data, LIMITS)


@pytest.mark.parametrize("text", ["%%%", "abc", "YWJj\n", 17])
def test_malformed_base64(text):
    with pytest.raises(InvalidProblemError) as info:
        npy.decode_base64("x", text, LIMITS)
    assert info.value.field == "x"


def test_encoding_is_plain_npy():
    raw = npy.encode_bytes(np.ones((2, 2), dtype=np.float32))
    assert raw.startswith(b"\x93NUMPY\x01\x00")
    assert base64.b64decode(npy.encode_base64(np.ones((2, 2), dtype=np.float32))) == raw
