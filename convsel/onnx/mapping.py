"""One ONNX ``Conv`` node -> one :class:`~convsel.problem.ConvProblem`.

ONNX Conv is NCHW with OIHW weights. For 2-D, ``pads`` is ``[y_begin, x_begin, y_end, x_end]``
and becomes convsel's ``(top, bottom, left, right)``; ``auto_pad`` SAME_UPPER / SAME_LOWER
put the odd padding pixel at the end / the beginning, as the ONNX operator spec says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidProblemError
from ..problem import ConvProblem
from .errors import PlanError, UnknownShapeError
from .reader import require_onnx
from .shapes import TensorInfo

# ONNX TensorProto element types convsel plans (FLOAT = 1, FLOAT16 = 10).
DTYPES: dict[int, str] = {1: "F32", 10: "F16"}
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class Skip(Exception):
    """A Conv convsel does not plan (not 2-D, or a dtype without ACL float kernels)."""


def attributes(node: Any) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    helper = require_onnx().helper
    values = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        values[attr.name] = value.decode() if isinstance(value, bytes) else value
    return values


def conv_problem(node: Any, name: str, tensors: Mapping[str, TensorInfo],
                 unknown_inputs: list[str], *, layout: str = "NCHW", fast_math: bool = False,
                 activation: Any = None) -> ConvProblem:
    """The ConvProblem of Conv ``node`` (called ``name`` in errors).

    Raises
    ------
    Skip
        A Conv that is not 2-D or has an element type other than float32 / float16.
    UnknownShapeError
        The input's shape is unknown or symbolic; the message says which input to override.
    PlanError
        Inconsistent attributes and shapes (the ConvProblem's own rule is quoted).
    """
    attrs = attributes(node)
    x = tensors.get(node.input[0], TensorInfo(0, None))
    wt = tensors.get(node.input[1], TensorInfo(0, None))
    rank = len(x.dims) if x.dims is not None else (len(wt.dims) if wt.dims else None)
    if rank is not None and rank != 4:
        raise Skip(f"{rank - 2}-D convolution: convsel plans 2-D convolutions only")
    n, c, h, w = _input_dims(node, name, x, unknown_inputs)
    elem = x.elem_type or wt.elem_type
    if elem == 0:
        raise PlanError(f"the element type of input {node.input[0]!r} is unknown", node=name)
    if elem not in DTYPES:
        raise Skip(f"element type {_type_name(elem)}: convsel plans float32 and float16 "
                   "convolutions")
    kh, kw, k = _kernel(node, name, attrs, wt, tensors)
    groups = _integer(attrs.get("group", 1), name, "group")
    if wt.dims is not None and isinstance(wt.dims[1], int) and wt.dims[1] * groups != c:
        raise PlanError(f"weights {node.input[1]!r} have {wt.dims[1]} input channels per "
                        f"group; with group={groups} the input needs {wt.dims[1] * groups} "
                        f"channels, it has {c}", node=name)
    stride = _pair(attrs.get("strides"), name, "strides")
    dilation = _pair(attrs.get("dilations"), name, "dilations")
    pad = padding(attrs, (h, w), (kh, kw), stride, dilation, name)
    try:
        return ConvProblem(n=n, h=h, w=w, c=c, k=k, kh=kh, kw=kw, stride=stride, pad=pad,
                           dilation=dilation, groups=groups, dtype=DTYPES[elem],
                           layout=layout, fast_math=fast_math, activation=activation)
    except InvalidProblemError as exc:
        raise PlanError(f"not a valid convolution: {exc}", node=name) from None


def padding(attrs: Mapping[str, Any], hw: tuple[int, int], kernel: tuple[int, int],
            stride: tuple[int, int], dilation: tuple[int, int],
            name: str) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from ``auto_pad`` and ``pads``."""
    auto = str(attrs.get("auto_pad", "NOTSET")) or "NOTSET"
    if auto not in AUTO_PADS:
        raise PlanError(f"auto_pad {auto!r} is not one of {', '.join(AUTO_PADS)}", node=name)
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto == "NOTSET":
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise PlanError(f"pads {pads} must have 4 values for a 2-D Conv "
                            "[y_begin, x_begin, y_end, x_end]", node=name)
        return (pads[0], pads[2], pads[1], pads[3])
    (top, bottom), (left, right) = (
        _same(size, k, s, d, upper=auto == "SAME_UPPER")
        for size, k, s, d in zip(hw, kernel, stride, dilation))
    return (top, bottom, left, right)


def _same(size: int, k: int, s: int, d: int, *, upper: bool) -> tuple[int, int]:
    """ONNX SAME padding of one axis: output = ceil(size / stride)."""
    out = -(-size // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def _input_dims(node: Any, name: str, x: TensorInfo,
                unknown_inputs: list[str]) -> tuple[int, int, int, int]:
    if x.known:
        assert x.dims is not None
        return tuple(int(d) for d in x.dims)  # type: ignore[return-value,arg-type]
    raise UnknownShapeError.of_input(node.input[0], x.describe(), node=name,
                                    inputs=unknown_inputs)


def _kernel(node: Any, name: str, attrs: Mapping[str, Any], wt: TensorInfo,
            tensors: Mapping[str, TensorInfo]) -> tuple[int, int, int]:
    k = wt.dims[0] if wt.dims is not None else None
    if not isinstance(k, int):
        out = tensors.get(node.output[0])
        k = out.dims[1] if out is not None and out.dims is not None else None
    kernel = attrs.get("kernel_shape")
    if kernel is not None:
        kernel = [_integer(v, name, "kernel_shape") for v in kernel]
    elif wt.dims is not None and len(wt.dims) == 4:
        kernel = wt.dims[2:]
    if not isinstance(k, int) or kernel is None or not all(isinstance(v, int) for v in kernel):
        raise UnknownShapeError(f"the weights {node.input[1]!r} have shape {wt.describe()} and "
                                "no kernel_shape attribute: the output channels or the "
                                "kernel size are unknown", node=name, value=wt.describe())
    kernel = [v for v in kernel if isinstance(v, int)]   # all of them: checked above
    if len(kernel) != 2:
        raise PlanError(f"kernel_shape {list(kernel)} is not 2-D", node=name)
    if wt.dims is not None and len(wt.dims) == 4 and list(wt.dims[2:]) != list(kernel):
        raise PlanError(f"kernel_shape {list(kernel)} disagrees with the weights "
                        f"{node.input[1]!r} of shape {wt.describe()}", node=name)
    return kernel[0], kernel[1], k


def _pair(value: Any, name: str, attr: str) -> tuple[int, int]:
    if value is None:
        return (1, 1)
    if not isinstance(value, list) or len(value) != 2:
        raise PlanError(f"{attr} {value!r} must be 2 integers (y, x) for a 2-D Conv",
                        node=name)
    return (_integer(value[0], name, attr), _integer(value[1], name, attr))


def _integer(value: Any, name: str, attr: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{attr} must hold integers, got {value!r}", node=name)
    return value


def _type_name(elem: int) -> str:
    if elem == 0:
        return "unknown"
    return str(require_onnx().TensorProto.DataType.Name(elem))
