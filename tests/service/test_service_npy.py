"""service.npy: .npy in and out, never unpickling, limits checked before allocating."""

from __future__ import annotations

import base64
import json
import pickle

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_support import PROBLEM, assert_error, conv_body, npy_bytes, tensors

from convsel.errors import InvalidProblemError
from service import npy
from service.app import create_app
from service.config import Settings
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


def negative_dimensions_npy() -> bytes:
    """A .npy whose header announces shape (-2, -3): 6 elements, as its 24 data bytes say."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(24)


def request_of(case: str) -> dict:
    x, w, _ = tensors()
    bad, files = negative_dimensions_npy(), {"w": ("w.npy", npy_bytes(w))}
    if case == "npy in JSON":
        return {"json": {**conv_body(x, w), "x": base64.b64encode(bad).decode()}}
    if case == "npy file":
        return {"data": {"problem": json.dumps(PROBLEM)}, "files": {"x": ("x.npy", bad), **files}}
    return {"data": {"problem": "[" * 2000 + "]" * 2000},     # nested 2,000 deep
            "files": {"x": ("x.npy", npy_bytes(x)), **files}}


@pytest.mark.parametrize(("case", "field", "rule"), [
    ("npy in JSON", "x", "dimensions must be >= 0"),
    ("npy file", "x", "dimensions must be >= 0"),
    ("deep problem", "problem", "nested too deeply")])
def test_negative_dimensions_and_deep_json_are_the_senders_fault(case, field, rule):
    with TestClient(create_app(Settings()), raise_server_exceptions=False) as c:
        answer = c.post("/v1/conv2d", **request_of(case))
    assert_error(answer, 422, "invalid_problem", field)
    assert rule in answer.json()["rule"]
