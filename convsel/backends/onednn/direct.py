"""Direct convolution by oneDNN: its forward-inference convolution primitive with the direct
algorithm, the weights reordered once into the layout the chosen kernel wants, bias and
activation fused into it (oneDNN's post-ops), the NHWC input and output used in place.

oneDNN may answer a "direct" request with an im2col + GEMM kernel ("gemm:jit"), which is
another method: convsel steps past those to the first generated direct kernel ("jit:avx512_core",
"brgconv:avx512_core", "brdgmm_dw:avx512_core" for depthwise, ...), and takes oneDNN's
reference loops ("ref:any", direct but slow: timing will say so) only where there is none, so
that ``direct`` on this backend always names a direct convolution. The kernel's name is kept
(:attr:`Direct.impl`) and shown in ``supports``' reason.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from ctypes import byref, c_char_p, c_void_p
from functools import lru_cache
from typing import Any

import numpy as np

from ...activation import Activation
from ...algorithms.direct import ONEDNN_SCRATCHPAD_BOUND, onednn_input_copy
from ...errors import UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed, passed
from ..numpy.common import check_x, new_output
from ..numpy.epilogue import cast
from ..numpy.profile import phase
from ..numpy.threads import chosen_threads
from . import library as dnnl
from .library import Library

# eltwise kinds of dnnl_alg_kind_t (dnnl_types.h, oneDNN 3.x)
RELU, TANH, ELU, ABS, LINEAR, LOGISTIC = 0x20, 0x21, 0x22, 0x24, 0x26, 0x29
SWISH, CLIP_V2, HARDSWISH = 0x2C, 0x2F, 0x34


def post_ops(act: Activation | None) -> list[tuple[int, float, float]]:
    """ACL's activation as oneDNN eltwise post-ops (kind, alpha, beta), applied in order."""
    if act is None:
        return []
    a, b = act.a, act.b
    table: dict[str, list[tuple[int, float, float]]] = {
        "relu": [(RELU, 0.0, 0.0)],
        "leaky_relu": [(RELU, a, 0.0)],
        "bounded_relu": [(CLIP_V2, 0.0, a)],
        "lu_bounded_relu": [(CLIP_V2, b, a)],
        "linear": [(LINEAR, a, b)],
        "logistic": [(LOGISTIC, 0.0, 0.0)],
        # a*tanh(b*x): oneDNN's tanh has no parameters
        "tanh": [(LINEAR, b, 0.0), (TANH, 0.0, 0.0), (LINEAR, a, 0.0)],
        "elu": [(ELU, a, 0.0)],
        "swish": [(SWISH, a, 0.0)],
        "hard_swish": [(HARDSWISH, 1.0 / 6.0, 0.5)],
        "abs": [(ABS, 0.0, 0.0)],
    }
    return table[act.kind]


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    if not p.is_float:
        return failed(f"onednn direct runs F32 and F16 only; {p.dtype} is selection-only")
    act = p.activation
    if act is not None and act.kind in ("bounded_relu", "lu_bounded_relu") and (
            act.a < (act.b if act.kind == "lu_bounded_relu" else 0.0)):
        return failed(f"onednn direct clips with lower <= upper; {act} has them reversed")
    return _probe(p)


@lru_cache(maxsize=4096)
def _probe(p: ConvProblem) -> Verdict:
    """Whether oneDNN has a direct kernel for ``p``, by building its primitive descriptor
    (no code is generated until a primitive is made); cached per problem."""
    lib = dnnl.library()
    if isinstance(lib, Verdict):
        return lib
    try:
        with _Descriptor(lib, p) as d:
            scratch = d.scratchpad_bytes()
            impl = d.impl
    except UnsupportedError as exc:
        return failed(str(exc))
    if scratch > ONEDNN_SCRATCHPAD_BOUND:
        # the workspace estimate (convsel.algorithms.direct) must hold
        return failed(f"oneDNN's {impl} kernel needs a {scratch} B scratchpad, more than "
                      f"the {ONEDNN_SCRATCHPAD_BOUND} B convsel's estimate allows for")
    return passed(f"oneDNN runs it with {impl}")


def _dims_strides(n: int, c: int, h: int, w: int) -> tuple[list[int], list[int]]:
    """oneDNN's logical (N, C, H, W) order over an NHWC array."""
    return [n, c, h, w], [h * w * c, 1, w * c, c]


def _weights_dims(p: ConvProblem) -> tuple[list[int], list[int]]:
    """oneDNN's logical weights order over convsel's OHWI array: (O, I, H, W), or
    (G, O/G, I/G, H, W) for a grouped problem."""
    kg, cg = p.k // p.groups, p.c // p.groups
    o, h, w = p.kh * p.kw * cg, p.kw * cg, cg
    if p.groups == 1:
        return [p.k, p.c, p.kh, p.kw], [o, 1, h, w]
    return [p.groups, kg, cg, p.kh, p.kw], [kg * o, o, 1, h, w]


class _Descriptor:
    """The primitive descriptor of ``p``'s direct convolution (context manager: destroyed on
    exit) with its memory descriptors; raises UnsupportedError when oneDNN has no direct
    kernel for it."""

    def __init__(self, lib: Library, p: ConvProblem) -> None:
        self.lib, self.p = lib, p
        self.owned: list[tuple[str, c_void_p]] = []
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _md(self, shape: tuple[list[int], list[int]]) -> c_void_p:
        sizes, strides = shape
        md = self.lib.new("dnnl_memory_desc_create_with_strides", len(sizes),
                          dnnl.dims(sizes), dnnl.F32, dnnl.dims(strides))
        self.owned.append(("dnnl_memory_desc_destroy", md))
        return md

    def _create(self) -> None:
        lib, p = self.lib, self.p
        self.src = self._md(_dims_strides(p.n, p.c, p.h, p.w))
        self.dst = self._md(_dims_strides(p.n, p.k, p.out_h, p.out_w))
        self.user_weights = self._md(_weights_dims(p))
        self.bias = self._md(([p.k], [1]))
        sizes = _weights_dims(p)[0]
        any_weights = lib.new("dnnl_memory_desc_create_with_tag", len(sizes),
                              dnnl.dims(sizes), dnnl.F32, dnnl.FORMAT_ANY)
        self.owned.append(("dnnl_memory_desc_destroy", any_weights))
        attr = lib.new("dnnl_primitive_attr_create")
        self.owned.append(("dnnl_primitive_attr_destroy", attr))
        lib.call("dnnl_primitive_attr_set_scratchpad_mode", attr, dnnl.SCRATCHPAD_USER)
        ops = post_ops(p.activation)
        if ops:
            chain = lib.new("dnnl_post_ops_create")
            self.owned.append(("dnnl_post_ops_destroy", chain))
            for kind, alpha, beta in ops:
                lib.call("dnnl_post_ops_append_eltwise", chain, kind, alpha, beta)
            lib.call("dnnl_primitive_attr_set_post_ops", attr, chain)
        top, bottom, left, right = p.pad
        dy, dx = p.dilation
        self.pd = lib.new("dnnl_convolution_forward_primitive_desc_create", lib.engine,
                          dnnl.FORWARD_INFERENCE, dnnl.CONVOLUTION_DIRECT, self.src,
                          any_weights, self.bias, self.dst, dnnl.dims(p.stride),
                          dnnl.dims([dy - 1, dx - 1]), dnnl.dims([top, left]),
                          dnnl.dims([bottom, right]), attr)
        self.owned.append(("dnnl_primitive_desc_destroy", self.pd))
        self.impl = self._direct_impl()

    def _impl_name(self) -> str:
        name = c_char_p()
        self.lib.call("dnnl_primitive_desc_query", self.pd, dnnl.QUERY_IMPL_INFO, 0,
                      byref(name))
        return (name.value or b"?").decode()

    def _direct_impl(self) -> str:
        """Step past oneDNN's GEMM implementations to its first generated direct kernel,
        else its first reference one (they come last in oneDNN's list)."""
        passed_over = []
        while True:
            name = self._impl_name()
            if not name.startswith("gemm"):
                return name
            passed_over.append(name)
            if self.lib.cdll.dnnl_primitive_desc_next_impl(self.pd) != dnnl.SUCCESS:
                raise UnsupportedError(
                    f"oneDNN has no direct kernel for {self.p}, only "
                    f"{', '.join(dict.fromkeys(passed_over))}", algorithm="direct",
                    backend="onednn")

    def scratchpad_bytes(self) -> int:
        return int(self.lib.cdll.dnnl_memory_desc_get_size(self.md(dnnl.QUERY_SCRATCHPAD_MD)))

    def md(self, query: int) -> c_void_p:
        return c_void_p(self.lib.cdll.dnnl_primitive_desc_query_md(self.pd, query, 0))

    def close(self) -> None:
        for destroy, handle in reversed(self.owned):
            getattr(self.lib.cdll, destroy)(handle)
        self.owned.clear()

    def __enter__(self) -> _Descriptor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Direct:
    """A prepared oneDNN direct convolution: ``run(x_nhwc) -> y_nhwc`` with bias and
    activation applied. One primitive and the reordered weights are shared; each thread
    that runs it gets its own stream, argument memories and scratchpad, so one prepared
    kernel may run in several threads at once."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.problem = p
        self.lib = lib = dnnl.loaded()
        self._handles: list[tuple[str, c_void_p]] = []
        self._finalizer = weakref.finalize(self, _release, lib, self._handles)
        self._bias = np.ascontiguousarray(np.zeros(p.k) if bias is None else bias,
                                          dtype=np.float32)
        # convsel's thread count where set_threads set one, else OpenMP's own; kept for runs
        self.threads = chosen_threads() if lib.runtime == "OpenMP" else None
        with dnnl.openmp_threads(self.threads), _Descriptor(lib, p) as d:
            self.impl = d.impl
            self.primitive = self._own("dnnl_primitive_destroy",
                                       lib.new("dnnl_primitive_create", d.pd))
            self.weights = self._reordered_weights(d, w_ohwi)
            scratch = d.md(dnnl.QUERY_SCRATCHPAD_MD)
            self.scratch_bytes = d.scratchpad_bytes()
            if self.scratch_bytes > ONEDNN_SCRATCHPAD_BOUND:   # more threads than probed
                self._finalizer()
                raise UnsupportedError(
                    f"oneDNN's {d.impl} kernel needs a {self.scratch_bytes} B scratchpad with "
                    f"{self.threads or 'OpenMP default'} threads, more than the "
                    f"{ONEDNN_SCRATCHPAD_BOUND} B convsel's estimate allows for",
                    algorithm="direct", backend="onednn")
            self._templates = {arg: self._memory_of(md) for arg, md in (
                (dnnl.ARG_SRC, d.src), (dnnl.ARG_DST, d.dst), (dnnl.ARG_BIAS, d.bias),
                (dnnl.ARG_SCRATCHPAD, scratch))}
        self.workspace_bytes = self.scratch_bytes + onednn_input_copy(p)
        self._local = threading.local()

    def _own(self, destroy: str, handle: c_void_p) -> c_void_p:
        self._handles.append((destroy, handle))
        return handle

    def _memory_of(self, md: c_void_p) -> c_void_p:
        """A memory holding no data, made once from ``md``: a template whose descriptor
        outlives the primitive descriptor's; each thread makes its own memories from it
        (:class:`_Bindings`)."""
        return self._own("dnnl_memory_destroy",
                         self.lib.new("dnnl_memory_create", md, self.lib.engine, None))

    def _reordered_weights(self, d: _Descriptor, w_ohwi: np.ndarray) -> c_void_p:
        lib = self.lib
        user = np.ascontiguousarray(w_ohwi, dtype=np.float32)
        wanted = d.md(dnnl.QUERY_WEIGHTS_MD)
        weights = self._own("dnnl_memory_destroy", lib.new(
            "dnnl_memory_create", wanted, lib.engine, dnnl.MEMORY_ALLOCATE))
        source = lib.new("dnnl_memory_create", d.user_weights, lib.engine,
                         c_void_p(user.ctypes.data))
        reorder_pd = c_void_p()
        reorder = c_void_p()
        stream = lib.new("dnnl_stream_create", lib.engine, dnnl.IN_ORDER)
        try:
            lib.call("dnnl_reorder_primitive_desc_create", byref(reorder_pd), d.user_weights,
                     lib.engine, wanted, lib.engine, None)
            lib.call("dnnl_primitive_create", byref(reorder), reorder_pd)
            args = (dnnl.ExecArg * 2)(dnnl.ExecArg(dnnl.ARG_SRC, source.value),
                                      dnnl.ExecArg(dnnl.ARG_DST, weights.value))
            lib.call("dnnl_primitive_execute", reorder, stream, 2, args)
            lib.call("dnnl_stream_wait", stream)
        finally:
            for destroy, handle in (("dnnl_primitive_destroy", reorder),
                                    ("dnnl_primitive_desc_destroy", reorder_pd),
                                    ("dnnl_memory_destroy", source),
                                    ("dnnl_stream_destroy", stream)):
                if handle:
                    getattr(lib.cdll, destroy)(handle)
        return weights

    def _bindings(self) -> _Bindings:
        found: _Bindings | None = getattr(self._local, "bindings", None)
        if found is None:
            found = self._local.bindings = _Bindings(self)
        return found

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        x = check_x(p, x)
        x32 = x if x.dtype == np.float32 and x.flags.c_contiguous else \
            np.ascontiguousarray(x, dtype=np.float32)
        y = new_output((p.n, p.out_h, p.out_w, p.k))
        with dnnl.openmp_threads(self.threads):
            self._bindings().execute(x32, y)
        return cast(p, y)

    def __repr__(self) -> str:
        return f"onednn Direct({self.problem}, {self.impl}, workspace={self.workspace_bytes} B)"


class _Bindings:
    """One thread's stream, argument memories and scratchpad for a :class:`Direct`."""

    def __init__(self, kernel: Direct) -> None:
        lib = kernel.lib
        self.lib, self.primitive = lib, kernel.primitive
        self.stream = kernel._own("dnnl_stream_destroy",
                                  lib.new("dnnl_stream_create", lib.engine, dnnl.IN_ORDER))
        self.memories = {}
        for arg in (dnnl.ARG_SRC, dnnl.ARG_DST, dnnl.ARG_BIAS, dnnl.ARG_SCRATCHPAD):
            md = c_void_p()
            lib.call("dnnl_memory_get_memory_desc", kernel._templates[arg], byref(md))
            self.memories[arg] = kernel._own("dnnl_memory_destroy", lib.new(
                "dnnl_memory_create", md, lib.engine, None))
        self.scratch = np.empty(max(kernel.scratch_bytes, 1), dtype=np.uint8)
        self.bias = kernel._bias
        lib.call("dnnl_memory_set_data_handle", self.memories[dnnl.ARG_BIAS],
                 c_void_p(self.bias.ctypes.data))
        lib.call("dnnl_memory_set_data_handle", self.memories[dnnl.ARG_SCRATCHPAD],
                 c_void_p(self.scratch.ctypes.data))
        entries = [(dnnl.ARG_SRC, self.memories[dnnl.ARG_SRC]),
                   (dnnl.ARG_WEIGHTS, kernel.weights),
                   (dnnl.ARG_BIAS, self.memories[dnnl.ARG_BIAS]),
                   (dnnl.ARG_DST, self.memories[dnnl.ARG_DST]),
                   (dnnl.ARG_SCRATCHPAD, self.memories[dnnl.ARG_SCRATCHPAD])]
        self.args = (dnnl.ExecArg * len(entries))(*(dnnl.ExecArg(a, m.value) for a, m in entries))

    def execute(self, x: np.ndarray, y: np.ndarray) -> None:
        lib = self.lib
        lib.call("dnnl_memory_set_data_handle", self.memories[dnnl.ARG_SRC],
                 c_void_p(x.ctypes.data))
        lib.call("dnnl_memory_set_data_handle", self.memories[dnnl.ARG_DST],
                 c_void_p(y.ctypes.data))
        with phase("library"):
            lib.call("dnnl_primitive_execute", self.primitive, self.stream, len(self.args),
                     self.args)
            lib.call("dnnl_stream_wait", self.stream)


def _release(lib: Library, handles: list[tuple[str, c_void_p]]) -> None:
    for destroy, handle in reversed(handles):
        getattr(lib.cdll, destroy)(handle)
    handles.clear()


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> Direct:
    return Direct(p, w_ohwi, bias)
