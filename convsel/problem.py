"""ConvProblem: one 2-D convolution, described by logical sizes whatever the memory layout."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .activation import Activation, parse_activation
from .errors import InvalidProblemError

DTYPES: dict[str, int] = {"F32": 4, "F16": 2, "QASYMM8": 1, "QASYMM8_SIGNED": 1}
FLOAT_DTYPES = ("F32", "F16")
LAYOUTS = ("NHWC", "NCHW")
_DTYPE_ALIASES = {"FLOAT32": "F32", "FP32": "F32", "FLOAT16": "F16", "FP16": "F16",
                  "HALF": "F16", "UINT8": "QASYMM8", "INT8": "QASYMM8_SIGNED"}
_SIZE_FIELDS = ("n", "h", "w", "c", "k", "kh", "kw")


def _int(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidProblemError(field_name, value, "must be an integer")
    return int(value)


def _pair(field_name: str, value: Any) -> tuple[int, int]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (_int(field_name, value[0]), _int(field_name, value[1]))
    raise InvalidProblemError(field_name, value, "expected an int or a (y, x) pair")


def _pads(value: Any) -> tuple[int, int, int, int]:
    if isinstance(value, (tuple, list)) and len(value) == 4:
        top, bottom, left, right = (_int("pad", v) for v in value)
        return (top, bottom, left, right)
    try:
        py, px = _pair("pad", value)
    except InvalidProblemError:
        raise InvalidProblemError("pad", value, "expected an int, a (py, px) pair or "
                                  "(top, bottom, left, right)") from None
    return (py, py, px, px)


def _dtype(value: Any) -> str:
    name = str(getattr(value, "name", value)).upper()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise InvalidProblemError("dtype", value, f"unknown dtype; known: {', '.join(DTYPES)}")
    return name


def _layout(value: Any) -> str:
    name = str(value).upper()
    if name not in LAYOUTS:
        raise InvalidProblemError("layout", value, f"unknown layout; known: {', '.join(LAYOUTS)}")
    return name


@dataclass(frozen=True)
class ConvProblem:
    """A 2-D convolution: input N×H×W×C, K filters of KH×KW, in logical (layout-free) sizes.

    ``stride`` and ``dilation`` are (y, x); ``pad`` is (top, bottom, left, right), and an int or
    a (py, px) pair is accepted. Construction normalises and validates every field and raises
    :class:`~convsel.errors.InvalidProblemError` naming the field, the value and the rule.
    """

    n: int
    h: int
    w: int
    c: int
    k: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "F32"
    layout: str = "NHWC"
    fast_math: bool = False
    activation: Activation | None = field(default=None)

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalisation happens once, here
        for name in _SIZE_FIELDS:
            value = _int(name, getattr(self, name))
            if value < 1:
                raise InvalidProblemError(name, value, "sizes must be >= 1")
            put(self, name, value)
        put(self, "stride", _pair("stride", self.stride))
        put(self, "dilation", _pair("dilation", self.dilation))
        put(self, "pad", _pads(self.pad))
        put(self, "groups", _int("groups", self.groups))
        put(self, "dtype", _dtype(self.dtype))
        put(self, "layout", _layout(self.layout))
        if not isinstance(self.fast_math, bool):
            raise InvalidProblemError("fast_math", self.fast_math, "must be true or false")
        put(self, "activation", parse_activation(self.activation))
        self._check_geometry()

    def _check_geometry(self) -> None:
        if min(self.stride) < 1:
            raise InvalidProblemError("stride", self.stride, "strides must be >= 1")
        if min(self.dilation) < 1:
            raise InvalidProblemError("dilation", self.dilation, "dilations must be >= 1")
        if min(self.pad) < 0:
            raise InvalidProblemError("pad", self.pad, "pads must be >= 0")
        ext_h, ext_w = self.kernel_extent
        if max(self.pad[:2]) >= ext_h or max(self.pad[2:]) >= ext_w:
            raise InvalidProblemError(
                "pad", self.pad, f"each pad must be smaller than the dilated kernel extent "
                f"(h {ext_h}, w {ext_w}): a larger pad makes outputs that see only padding")
        if self.out_h < 1 or self.out_w < 1:
            raise InvalidProblemError(
                "h/w", (self.h, self.w), f"input plus padding is smaller than the dilated kernel "
                f"extent ({ext_h}, {ext_w}): the output would be empty")
        if self.groups < 1 or self.c % self.groups or self.k % self.groups:
            raise InvalidProblemError("groups", self.groups,
                                      f"must be >= 1 and divide c={self.c} and k={self.k}")

    # Derived sizes. cached_property stores into __dict__, which a frozen dataclass allows.
    @cached_property
    def kernel_extent(self) -> tuple[int, int]:
        """Height and width the kernel spans once dilated."""
        return (self.dilation[0] * (self.kh - 1) + 1, self.dilation[1] * (self.kw - 1) + 1)

    @cached_property
    def out_h(self) -> int:
        return (self.h + self.pad[0] + self.pad[1] - self.kernel_extent[0]) // self.stride[0] + 1

    @cached_property
    def out_w(self) -> int:
        return (self.w + self.pad[2] + self.pad[3] - self.kernel_extent[1]) // self.stride[1] + 1

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """Shape of the input tensor in this problem's layout."""
        return self._in_layout(self.n, self.h, self.w, self.c)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        """Shape of the output tensor in this problem's layout."""
        return self._in_layout(self.n, self.out_h, self.out_w, self.k)

    @property
    def weights_shape(self) -> tuple[int, int, int, int]:
        """Weights in OHWI (ACL's NHWC weights): K × KH × KW × C/groups."""
        return (self.k, self.kh, self.kw, self.c // self.groups)

    def _in_layout(self, n: int, h: int, w: int, c: int) -> tuple[int, int, int, int]:
        return (n, h, w, c) if self.layout == "NHWC" else (n, c, h, w)

    @property
    def element_size(self) -> int:
        return DTYPES[self.dtype]

    @property
    def input_bytes(self) -> int:
        """ACL's ``total_size()`` of the source tensor (no padding)."""
        return self.n * self.h * self.w * self.c * self.element_size

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two operations, without bias or activation."""
        return 2 * self.n * self.out_h * self.out_w * self.k * self.kh * self.kw * (
            self.c // self.groups)

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def replace(self, **changes: Any) -> ConvProblem:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form; :meth:`from_dict` reads it back."""
        return {
            "n": self.n, "h": self.h, "w": self.w, "c": self.c, "k": self.k,
            "kh": self.kh, "kw": self.kw, "stride": list(self.stride), "pad": list(self.pad),
            "dilation": list(self.dilation), "groups": self.groups, "dtype": self.dtype,
            "layout": self.layout, "fast_math": self.fast_math,
            "activation": self.activation.to_dict() if self.activation else None,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ConvProblem:
        """Build from :meth:`to_dict`'s form; unknown or missing keys are named in the error."""
        if not isinstance(data, dict):
            raise InvalidProblemError("problem", data, "expected a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidProblemError(unknown[0], data[unknown[0]],
                                      f"unknown field; known: {', '.join(sorted(known))}")
        missing = [name for name in _SIZE_FIELDS if name not in data]
        if missing:
            raise InvalidProblemError(missing[0], None, "required field is missing")
        return cls(**data)

    def __str__(self) -> str:
        # sizes in the problem's own layout: an NCHW problem reads N x C x H x W
        s = (f"{'x'.join(map(str, self.input_shape))} -> {self.k}, {self.kh}x{self.kw}, "
             f"stride {self.stride[0]}x{self.stride[1]}, pad {self.pad}")
        if self.dilation != (1, 1):
            s += f", dilation {self.dilation}"
        if self.groups != 1:
            s += f", groups {self.groups}"
        return f"{s}, {self.dtype} {self.layout}" + (", fast-math" if self.fast_math else "")
