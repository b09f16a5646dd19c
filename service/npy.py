"""Tensors on the wire: ``.npy`` bytes (numpy's own format), raw or base64.

Decoding never unpickles: the header is read first, object, structured, string and complex
dtypes are refused, the shape is checked against the limits, and only then are the data bytes
viewed as numbers (no ``np.load``, so no pickle path exists at all). Encoding uses
``np.save(allow_pickle=False)``.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import threading
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from convsel import InvalidProblemError

from .errors import TooLargeError

NPY_MEDIA_TYPE = "application/x-npy"
_KINDS = "biuf"           # bool, signed, unsigned, float: numbers a convolution can read
_HEADER_ALLOWANCE = 4096  # bytes of .npy header tolerated on top of the data
# numpy parses the header with ast.literal_eval; CPython 3.11's compiler is not safe to run
# from several threads at once ("AST constructor recursion depth mismatch"), and
# convolutions decode on a thread pool.
_HEADER_LOCK = threading.Lock()


@dataclass(frozen=True)
class TensorLimits:
    max_elements: int
    max_bytes: int


def decode_base64(field: str, text: str, limits: TensorLimits) -> np.ndarray:
    """Decode base64 of ``.npy`` bytes into an array; errors name ``field``.

    Raises
    ------
    TooLargeError
        The text, or the array its header announces, is over ``limits`` (HTTP 413).
    InvalidProblemError
        Not base64, not ``.npy``, a refused dtype, or data that does not match the header.
    """
    if not isinstance(text, str):
        raise InvalidProblemError(field, type(text).__name__, "expected base64 text of .npy bytes")
    encoded_limit = (limits.max_bytes + _HEADER_ALLOWANCE) * 4 // 3 + 4
    if len(text) > encoded_limit:
        raise TooLargeError(field, len(text), encoded_limit, "base64 length")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidProblemError(field, _preview(text), "not valid base64 (RFC 4648 standard "
                                  "alphabet, with padding)") from None
    return decode_bytes(field, raw, limits)


def decode_file(field: str, stream: BinaryIO, limits: TensorLimits) -> np.ndarray:
    """Decode a ``.npy`` file (an upload spooled to disk) straight into the array it holds:
    the header is checked first, then the data is read into the one buffer that becomes the
    array, so the tensor is never held twice (see :func:`decode_base64` for the errors)."""
    dtype, shape, fortran = _header(field, stream)
    _check(field, dtype, shape, limits)
    count = math.prod(shape)
    array = np.empty(count, dtype=dtype)
    view = memoryview(array).cast("B")
    got = _read_into(stream, view)
    extra = len(stream.read(1))
    if got != view.nbytes or extra:
        size = f"{got}{'+' if extra else ''} data bytes"
        raise InvalidProblemError(field, size, f"the header announces {shape} {dtype}, "
                                  f"{view.nbytes} bytes")
    del view
    if not dtype.isnative:
        array = array.byteswap().view(dtype.newbyteorder("="))
    array = array.reshape(shape, order="F" if fortran else "C")
    return np.ascontiguousarray(array)


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    got = 0
    while got < view.nbytes:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def decode_bytes(field: str, raw: bytes, limits: TensorLimits) -> np.ndarray:
    """Decode ``.npy`` bytes into a native-byte-order array (see :func:`decode_base64`)."""
    stream = io.BytesIO(raw)
    dtype, shape, fortran = _header(field, stream)
    _check(field, dtype, shape, limits)
    count = math.prod(shape)
    data = len(raw) - stream.tell()
    if data != dtype.itemsize * count:
        raise InvalidProblemError(field, f"{data} data bytes", f"the header announces "
                                  f"{shape} {dtype}, {dtype.itemsize * count} bytes")
    # The header is checked; the data is plain numbers (no pickle can be reached): view the
    # bytes, then copy into an array the caller owns.
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell())
    array = flat.reshape(shape, order="F" if fortran else "C")
    return np.array(array, dtype=dtype.newbyteorder("="), order="C")


def encode_bytes(array: np.ndarray) -> bytes:
    """``.npy`` bytes of ``array`` (format 1.0 for numeric dtypes)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def encode_base64(array: np.ndarray) -> str:
    return base64.b64encode(encode_bytes(array)).decode("ascii")


def _header(field: str, stream: BinaryIO) -> tuple[np.dtype, tuple[int, ...], bool]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version} is not accepted (1.0 or 2.0)")
        reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        with _HEADER_LOCK:
            shape, fortran, dtype = reader(stream)
    except Exception as exc:  # noqa: BLE001
        # numpy parses the header with tokenize and ast.literal_eval, which raise many types
        # on malformed text (ValueError, SyntaxError, tokenize.TokenError, MemoryError on a
        # deeply nested literal, ...): every one is the sender's bad input, never a 500.
        raise InvalidProblemError(field, "npy header",
                                  f"not a .npy array: {type(exc).__name__}: {exc}") from None
    return np.dtype(dtype), tuple(int(d) for d in shape), bool(fortran)


def _check(field: str, dtype: np.dtype, shape: tuple[int, ...], limits: TensorLimits) -> None:
    if dtype.hasobject or dtype.kind not in _KINDS or dtype.fields is not None:
        raise InvalidProblemError(field, str(dtype), "dtype refused: only bool, integer and "
                                  "floating-point arrays are read (never objects or records)")
    if any(d < 0 for d in shape):
        # numpy's header reader takes them; two negatives multiply to a size that passes
        # the limits, and reshape() then fails
        raise InvalidProblemError(field, list(shape), "the header's dimensions must be >= 0")
    elements = math.prod(shape)
    if elements > limits.max_elements:
        raise TooLargeError(field, elements, limits.max_elements, "tensor elements")
    if elements * dtype.itemsize > limits.max_bytes:
        raise TooLargeError(field, elements * dtype.itemsize, limits.max_bytes, "tensor bytes")


def _preview(text: str) -> str:
    return text if len(text) <= 32 else text[:29] + "..."
