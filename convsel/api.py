"""conv2d() and prepare(): the user's front door. A policy chooses (or the caller names) the
algorithm, then :mod:`convsel.execute` builds it on the backend.

In ACL's configure/prepare/run spirit, :func:`prepare` binds a problem and its weights once
(transforming the weights for the algorithm), and :meth:`PreparedConv.run` is then called many
times. :func:`conv2d` is prepare + run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from . import algorithms, backends, execute
from .errors import InvalidProblemError, UnsupportedError
from .layouts import WEIGHTS_LAYOUTS, nchw_to_nhwc, nhwc_to_nchw, ohwi_shape, weights_to_ohwi
from .policies import POLICY_OPTIONS, choose
from .problem import ConvProblem
from .rules import Rules, as_rules
from .selection import Selection
from .targets import resolve_target

_NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16}


@dataclass
class PreparedConv:
    """A problem bound to its weights on one backend; call :meth:`run` many times.

    ``method`` is ACL's name for what runs, ``algorithm`` convsel's implementation,
    ``backend`` where it runs, ``fallback`` why that differs from what was asked (or None),
    ``workspace_bytes`` the memory the algorithm needs beyond input, weights and output.
    """

    problem: ConvProblem
    method: str
    algorithm: str
    backend: str
    params: dict[str, Any]
    selection: Selection | None
    fallback: str | None
    kernel: Any

    @property
    def workspace_bytes(self) -> int:
        return int(self.kernel.workspace_bytes)

    @property
    def queue(self) -> Any:
        """The OpenCL queue runs use by default (shared by every convolution prepared on the
        same device, so a chain of layers runs back to back); None off OpenCL."""
        return getattr(self.kernel, "queue", None)

    def run(self, x: Any, *, out: Any = None, queue: Any = None, wait_for: Any = None,
            shape: Any = None) -> Any:
        """Convolve ``x`` (in the problem's layout and dtype); returns the same layout.

        A numpy ``x`` gives a numpy result (written into ``out`` when given), blocking. On
        the OpenCL backend a ``pyopencl.array.Array`` on ``op.queue``'s context (or a
        ``cl.Buffer`` with ``shape=``) gives a ``pyopencl.array.Array`` (``out`` when given)
        without touching the host: the call returns once the work is enqueued on ``queue``
        (default: x's queue, else ``op.queue``) after ``wait_for`` and the arrays' events.
        Device arrays are in the problem's layout too (NCHW is transposed on the device).
        """
        if _is_device_array(x):
            return self._run_device(x, out, queue, wait_for, shape)
        p = self.problem
        x = _check_input(p, x)
        if out is not None:
            _check_output(p, out)
        options = {k: v for k, v in (("queue", queue), ("wait_for", wait_for)) if v is not None}
        if options and not hasattr(self.kernel, "run_device"):
            raise InvalidProblemError(next(iter(options)), "given", f"the {self.backend} "
                                      "backend runs on the host; it takes no OpenCL queue or "
                                      "events")
        if p.layout == "NCHW":
            y = nhwc_to_nchw(self.kernel.run(nchw_to_nhwc(x), **options))
        else:
            y = self.kernel.run(np.ascontiguousarray(x), **options)
        if out is None:
            return y
        np.copyto(out, y)
        return out

    def _run_device(self, x: Any, out: Any, queue: Any, wait_for: Any, shape: Any) -> Any:
        run_device = getattr(self.kernel, "run_device", None)
        if run_device is None:
            why = f" (it fell back: {self.fallback})" if self.fallback else ""
            raise UnsupportedError(f"device arrays need the opencl backend; this convolution "
                                   f"runs on {self.backend}{why}", backend=self.backend)
        return run_device(x, out=out, queue=queue, wait_for=wait_for, shape=shape)


def _is_device_array(x: Any) -> bool:
    """A pyopencl object (Array, Buffer), told apart without importing pyopencl."""
    return type(x).__module__.split(".")[0] == "pyopencl"


def _check_input(p: ConvProblem, x: Any) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise InvalidProblemError("x", type(x).__name__, "expected a numpy array (or, on the "
                                  "opencl backend, a pyopencl.array.Array)")
    if x.shape != p.input_shape:
        raise InvalidProblemError("x", x.shape, f"expected shape {p.input_shape} "
                                  f"({p.layout}) for this problem")
    if not np.issubdtype(x.dtype, np.floating):
        raise InvalidProblemError("x", str(x.dtype), "must be a floating-point array")
    return x.astype(_NUMPY_DTYPES[p.dtype], copy=False)


def _check_output(p: ConvProblem, out: Any) -> None:
    if not isinstance(out, np.ndarray):
        raise InvalidProblemError("out", type(out).__name__, "a numpy x needs a numpy out")
    if out.shape != p.output_shape:
        raise InvalidProblemError("out", out.shape, f"expected shape {p.output_shape} "
                                  f"({p.layout}) for this problem")
    if out.dtype != _NUMPY_DTYPES[p.dtype]:
        raise InvalidProblemError("out", str(out.dtype), f"must be "
                                  f"{np.dtype(_NUMPY_DTYPES[p.dtype]).name} for this "
                                  f"{p.dtype} problem")


def _check_weights(p: ConvProblem, w: Any, layout: str, bias: Any) -> tuple[np.ndarray,
                                                                           np.ndarray | None]:
    if layout not in WEIGHTS_LAYOUTS:
        raise InvalidProblemError("weights_layout", layout,
                                  f"unknown layout; known: {', '.join(WEIGHTS_LAYOUTS)}")
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise InvalidProblemError("w", getattr(w, "shape", type(w).__name__),
                                  "expected a 4-D numpy array")
    if not np.issubdtype(w.dtype, np.floating):
        raise InvalidProblemError("w", str(w.dtype), "must be a floating-point array")
    if ohwi_shape(w.shape, layout) != p.weights_shape:
        raise InvalidProblemError("w", w.shape, f"{layout} weights for this problem must hold "
                                  f"K={p.k}, KH={p.kh}, KW={p.kw}, C/groups={p.c // p.groups}")
    dtype = _NUMPY_DTYPES[p.dtype]
    w_ohwi = weights_to_ohwi(w, layout).astype(dtype, copy=False)
    if bias is None:
        return w_ohwi, None
    if not isinstance(bias, np.ndarray) or bias.shape != (p.k,):
        raise InvalidProblemError("bias", getattr(bias, "shape", type(bias).__name__),
                                  f"expected a 1-D array of K={p.k} values")
    if not np.issubdtype(bias.dtype, np.floating):
        raise InvalidProblemError("bias", str(bias.dtype), "must be a floating-point array")
    return w_ohwi, np.ascontiguousarray(bias, dtype=dtype)


def prepare(problem: ConvProblem, w: np.ndarray, bias: np.ndarray | None = None, *,
            weights_layout: str = "OHWI", algorithm: str = "auto", backend: str = "numpy",
            target: str = "cpu", device: Any = None, policy: str = "acl",
            rules: Rules | str | None = None, tile: tuple[int, int] | None = None,
            params: dict[str, Any] | None = None, db: Any = None,
            max_workspace_bytes: int | None = None, tune: bool | str = False,
            tune_budget_s: float | None = None) -> PreparedConv:
    """Bind ``problem`` and its weights to an algorithm on a backend.

    ``algorithm="auto"`` runs what ``policy`` chooses for ``target`` (see
    :func:`convsel.choose`); a named algorithm runs that one with ``params`` (``tile`` is
    short for ``params={"tile": tile}``) or raises :class:`UnsupportedError` with the reason.
    On the OpenCL backend, a missing driver, a failed build or an unsupported method falls
    back to numpy with a :class:`FallbackWarning`; ``fallback`` on the result says why.

    ``max_workspace_bytes`` runs the best algorithm whose workspace on ``backend`` fits (the
    policy's choice if it does; the selection's trace names what was excluded); a named
    algorithm over the limit raises :class:`UnsupportedError`. With ``policy="measured"``,
    ``tune="auto"`` times the candidates the first time a problem is seen on this device
    (within about ``tune_budget_s`` seconds), records them in the tuning database (``db``)
    and reuses them after, like ``torch.backends.cudnn.benchmark = True``.
    """
    if not isinstance(problem, ConvProblem):
        raise InvalidProblemError("problem", type(problem).__name__, "expected a ConvProblem")
    if problem.dtype not in _NUMPY_DTYPES:
        raise UnsupportedError(f"dtype {problem.dtype} is selection-only: convsel runs F32 and "
                               "F16 convolutions")
    if backend not in backends.BACKENDS:
        raise InvalidProblemError("backend", backend,
                                  f"unknown backend; known: {', '.join(backends.BACKENDS)}")
    if (tune or tune_budget_s is not None) and policy != "measured":
        raise InvalidProblemError("tune", tune, "tuning on first use needs "
                                  "policy=\"measured\" (it records and reads its timings)")
    w_ohwi, b = _check_weights(problem, w, weights_layout, bias)
    loaded = as_rules(rules)
    asked = {**(params or {}), **({"tile": tuple(tile)} if tile is not None else {})}
    context = {"backend": backend, "device": device, "db": db,
               "tune": tune or None, "tune_budget_s": tune_budget_s}
    selection, name, resolved = _choose(problem, algorithm, target, policy, loaded, context,
                                        asked, max_workspace_bytes)
    method = (selection.method if selection else
              algorithms.method_for(name, resolve_target(target, loaded).is_gpu))
    kernel, used, why = execute.build(problem, name, resolved, backend, w_ohwi, b, device)
    return PreparedConv(problem, method, name, used, resolved, selection, why, kernel)


def _choose(p: ConvProblem, algorithm: str, target: str, policy: str, rules: Rules,
            context: dict[str, Any], asked: dict[str, Any], max_workspace: int | None,
            ) -> tuple[Selection | None, str, dict[str, Any]]:
    backend = context["backend"]
    if algorithm == "auto":
        options = {k: v for k, v in context.items()
                   if k in POLICY_OPTIONS.get(policy, ()) and v is not None}
        sel = choose(p, target, policy=policy, rules=rules,
                     max_workspace_bytes=max_workspace, workspace_backend=backend, **options)
        return sel, sel.algorithm, execute.resolve(sel.algorithm, p, rules,
                                                   {**sel.params, **asked})
    resolved = execute.resolve(algorithm, p, rules, asked)
    if max_workspace is not None:
        _check_named_workspace(p, algorithm, resolved, backend, max_workspace)
    return None, algorithm, resolved


def _check_named_workspace(p: ConvProblem, algorithm: str, params: dict[str, Any],
                           backend: str, limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidProblemError("max_workspace_bytes", limit,
                                  "must be an integer >= 0 (bytes), or None for no limit")
    need = algorithms.workspace_bytes(algorithm, p, params, backend)
    if need is None or need > limit:
        label = algorithms.label_of(algorithm, params)
        raise UnsupportedError(
            f"{label} on {backend} needs {need} bytes of workspace, over "
            f"max_workspace_bytes={limit}" if need is not None else
            f"{label} has no workspace estimate on {backend}, so max_workspace_bytes="
            f"{limit} excludes it", algorithm=algorithm, backend=backend)


def problem_from_arrays(x: np.ndarray, w: np.ndarray, *, stride: Any = 1, pad: Any = 0,
                        dilation: Any = 1, groups: int | None = None, activation: Any = None,
                        fast_math: bool = False, weights_layout: str = "OHWI",
                        layout: str = "NHWC") -> ConvProblem:
    """The ConvProblem that ``x`` and ``w`` describe (groups inferred from w's channels)."""
    for name, arr in (("x", x), ("w", w)):
        array_like = isinstance(arr, np.ndarray) or (name == "x" and _is_device_array(arr)
                                                      and hasattr(arr, "ndim"))
        if not array_like or arr.ndim != 4:
            raise InvalidProblemError(name, getattr(arr, "shape", type(arr).__name__),
                                      "expected a 4-D numpy array")
    if weights_layout not in WEIGHTS_LAYOUTS:
        raise InvalidProblemError("weights_layout", weights_layout,
                                  f"unknown layout; known: {', '.join(WEIGHTS_LAYOUTS)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise InvalidProblemError("x", str(x.dtype), "must be a floating-point array")
    layout = str(layout).upper()
    n, h, w_, c = x.shape if layout == "NHWC" else (x.shape[0], x.shape[2], x.shape[3],
                                                   x.shape[1])
    k, kh, kw, cg = ohwi_shape(w.shape, weights_layout)
    if groups is None:
        if cg < 1 or c % cg:
            raise InvalidProblemError("w", w.shape, f"weights hold {cg} input channels, which "
                                      f"does not divide the input's C={c}")
        groups = c // cg
    elif cg * groups != c:
        raise InvalidProblemError("w", w.shape, f"with groups={groups} the weights must hold "
                                  f"C/groups={c // max(groups, 1)} input channels, not {cg}")
    dtype = "F16" if x.dtype == np.float16 else "F32"
    return ConvProblem(n, h, w_, c, k, kh, kw, stride=stride, pad=pad, dilation=dilation,
                       groups=groups, dtype=dtype, layout=layout, fast_math=fast_math,
                       activation=activation)


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, stride: Any = (1, 1),
           pad: Any = 0, dilation: Any = (1, 1), activation: Any = None,
           fast_math: bool = False, weights_layout: str = "OHWI", algorithm: str = "auto",
           backend: str = "numpy", target: str = "cpu", *, layout: str = "NHWC",
           groups: int | None = None, device: Any = None, policy: str = "acl",
           rules: Rules | str | None = None, db: Any = None,
           max_workspace_bytes: int | None = None, tune: bool | str = False,
           tune_budget_s: float | None = None) -> np.ndarray:
    """Convolve ``x`` (NHWC, or NCHW with ``layout="NCHW"``) with ``w``; same layout out.

    float16 input runs as F16 (half in and out, float32 accumulation); any other float dtype
    runs as F32. See :func:`prepare` for ``algorithm``, ``backend``, fallbacks,
    ``max_workspace_bytes`` and ``tune``. With ``backend="opencl"``, a
    ``pyopencl.array.Array`` x gives one back (see :meth:`PreparedConv.run`). PyTorch's
    ``F.conv2d(x, w)`` is ``conv2d(x, w, layout="NCHW", weights_layout="OIHW")``.
    """
    if device is None and _is_device_array(x):     # x's device: its context must be op's
        device = cast(Any, x).context.devices[0]
    try:
        problem = problem_from_arrays(x, w, stride=stride, pad=pad, dilation=dilation,
                                      groups=groups, activation=activation,
                                      fast_math=fast_math, weights_layout=weights_layout,
                                      layout=layout)
    except InvalidProblemError as exc:
        raise _with_torch_hint(exc, x, w, layout, weights_layout, groups) from None
    op = prepare(problem, w, bias, weights_layout=weights_layout, algorithm=algorithm,
                 backend=backend, target=target, device=device, policy=policy, rules=rules,
                 db=db, max_workspace_bytes=max_workspace_bytes, tune=tune,
                 tune_budget_s=tune_budget_s)
    y: np.ndarray = op.run(x)
    return y


TORCH_HINT = ('PyTorch\'s conventions (x NCHW, w OIHW) fit these shapes: pass '
              'layout="NCHW", weights_layout="OIHW"')


def _with_torch_hint(exc: InvalidProblemError, x: Any, w: Any, layout: str,
                     weights_layout: str, groups: int | None) -> InvalidProblemError:
    """``exc``, with the hint to say NCHW/OIHW when the defaults failed on arrays that read
    as PyTorch's (input channels at x.shape[1], w.shape[1] dividing them)."""
    if (str(layout).upper(), weights_layout) == ("NCHW", "OIHW") or not _reads_as_torch(
            x, w, groups):
        return exc
    return InvalidProblemError(exc.field, exc.value, f"{exc.rule}; {TORCH_HINT}")


def _reads_as_torch(x: Any, w: Any, groups: int | None) -> bool:
    if not (isinstance(x, np.ndarray) and isinstance(w, np.ndarray) and x.ndim == w.ndim == 4):
        return False
    c, cg = int(x.shape[1]), int(w.shape[1])
    if groups is not None:
        return cg * groups == c and int(w.shape[0]) % groups == 0
    return cg >= 1 and c % cg == 0 and int(w.shape[0]) % (c // cg) == 0
