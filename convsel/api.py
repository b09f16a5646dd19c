"""conv2d() and prepare(): the user's front door. A policy chooses (or the caller names) the
algorithm, then :mod:`convsel.execute` builds it on the backend.

In ACL's configure/prepare/run spirit, :func:`prepare` binds a problem and its weights once
(transforming the weights for the algorithm), and :meth:`PreparedConv.run` is then called many
times. :func:`conv2d` is prepare + run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from . import algorithms, arguments, execute, interop
from .backends import Placement, Preference
from .errors import InvalidProblemError, UnsupportedError
from .layouts import nchw_to_nhwc, nhwc_to_nchw, ohwi_shape
from .policies import decide, get_policy, options_for
from .problem import ConvProblem
from .rules import Rules, as_rules
from .selection import Selection
from .targets import resolve_target


@dataclass
class PreparedConv:
    """A problem bound to its weights on one backend; call :meth:`run` many times.

    ``method`` is ACL's name for what runs, ``algorithm`` convsel's implementation,
    ``backend`` where it runs, ``fallback`` why that differs from what was asked (or None),
    ``passed_over`` each backend of a preference list that did not run it, with the reason
    (ArmNN's "layer not supported by backend X"), ``workspace_bytes`` the memory the
    algorithm needs beyond input, weights and output.
    """

    problem: ConvProblem
    method: str
    algorithm: str
    backend: str
    params: dict[str, Any]
    selection: Selection | None
    fallback: str | None
    kernel: Any
    passed_over: tuple[str, ...] = ()

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
        if interop.is_foreign(x):   # a torch tensor, a JAX or CuPy array, ...
            given = interop.host_array("x", x)
            y = interop.result(self.run(given.array, out=out, queue=queue, wait_for=wait_for),
                               given)
            interop.say([given.note], y)
            return y
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
    arguments.float_array("x", x, x.ndim)
    interop.say_dtype(x, arguments.NUMPY_DTYPES[p.dtype])   # float64 in: said, not silent
    return x.astype(arguments.NUMPY_DTYPES[p.dtype], copy=False)


def _check_output(p: ConvProblem, out: Any) -> None:
    if not isinstance(out, np.ndarray):
        raise InvalidProblemError("out", type(out).__name__, "a numpy x needs a numpy out")
    if out.shape != p.output_shape:
        raise InvalidProblemError("out", out.shape, f"expected shape {p.output_shape} "
                                  f"({p.layout}) for this problem")
    dtype = arguments.NUMPY_DTYPES[p.dtype]
    if out.dtype != dtype:
        raise InvalidProblemError("out", str(out.dtype), f"must be {np.dtype(dtype).name} for "
                                  f"this {p.dtype} problem")


def prepare(problem: ConvProblem, w: np.ndarray, bias: np.ndarray | None = None, *,
            weights_layout: str = "OHWI", algorithm: str = "auto",
            backend: str | Sequence[str] | Preference = "numpy",
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

    ``backend`` may list several backends in order of preference (``["opencl", "numpy"]``,
    ``"opencl:1,numpy"`` with a device index, or ``"auto"``: every backend available here),
    as ArmNN's ``backendPreferences``: the first that supports the problem with the chosen
    algorithm runs it, and ``passed_over`` (and a :class:`FallbackWarning`) names the others
    with their reasons; none is an :class:`UnsupportedError` giving every reason. With
    ``policy="measured"`` or ``"predicted"`` the policy compares the backends instead and
    runs the fastest (:mod:`convsel.policies.across`); the selection names it.

    ``max_workspace_bytes`` runs the best algorithm whose workspace on ``backend`` fits (the
    policy's choice if it does; the selection's trace names what was excluded); a named
    algorithm over the limit (or a numpy fallback over it) raises
    :class:`~convsel.errors.WorkspaceLimitError` before it is built (its weights
    transformed). With ``policy="measured"``, ``tune="auto"`` times the candidates the first
    time a problem is seen on this device (within about ``tune_budget_s`` seconds), records
    them in the tuning database (``db``) and reuses them after, like
    ``torch.backends.cudnn.benchmark = True``. ``db``, ``tune`` and ``tune_budget_s`` are the
    policy's options: a policy that does not take one refuses it.
    """
    problem = arguments.runnable(arguments.problem(problem))
    algorithm = arguments.algorithm(algorithm)
    order = arguments.backends(backend)
    device = arguments.device_beside(order, device)
    max_workspace_bytes = arguments.workspace_limit(max_workspace_bytes)
    layout = arguments.weights_layout(weights_layout)
    given = [interop.host_array("w", w), interop.host_array("bias", bias)]
    interop.say([g.note for g in given])
    w_ohwi = arguments.weights(problem, given[0].array, layout)
    b = arguments.bias(problem, given[1].array)
    asked = arguments.algorithm_params(params, tile)
    # the policy's own options when given; where it runs, when the policy takes it
    chosen = get_policy(policy, **options_for(
        policy, {"db": db, "tune": tune or None, "tune_budget_s": tune_budget_s},
        defaults={"backend": order, "device": device}))
    loaded = as_rules(rules)
    on = resolve_target(target, loaded)
    selection = None if algorithm != "auto" else decide(
        problem, on, loaded, chosen, max_workspace_bytes=max_workspace_bytes,
        workspace_backend=order.first.backend if order.single else None)
    name = selection.algorithm if selection else algorithm
    method = selection.method if selection else algorithms.method_for(name, on.is_gpu)
    resolved = execute.resolve(name, problem, loaded,
                               {**selection.params, **asked} if selection else asked)
    built = execute.build_first(problem, name, resolved, _chosen_first(order, selection),
                                w_ohwi, b, device, max_workspace_bytes=max_workspace_bytes)
    return PreparedConv(problem, method, name, built.backend, resolved, selection,
                        built.fallback, built.kernel, built.passed_over)


def _chosen_first(order: Preference, selection: Selection | None) -> list[Placement]:
    """The backends to try, in order: the one a policy chose among them first."""
    entries = list(order)
    chosen = [e for e in entries if selection is not None and str(e) == selection.backend]
    return chosen + [e for e in entries if e not in chosen]


def problem_from_arrays(x: np.ndarray, w: np.ndarray, *, stride: Any = 1, pad: Any = 0,
                        dilation: Any = 1, groups: int | None = None, activation: Any = None,
                        fast_math: bool = False, weights_layout: str = "OHWI",
                        layout: str = "NHWC") -> ConvProblem:
    """The ConvProblem that ``x`` and ``w`` describe (groups inferred from w's channels).
    Arrays of other libraries (DLPack or ``__array__``) are read as :func:`conv2d` reads
    them."""
    x, w = interop.host_array("x", x).array, interop.host_array("w", w).array
    if not _is_device_array(x):
        arguments.float_array("x", x, 4)
    elif getattr(x, "ndim", None) != 4 or not np.issubdtype(x.dtype, np.floating):
        raise InvalidProblemError("x", getattr(x, "shape", type(x).__name__),
                                  "expected a 4-D floating-point pyopencl array")
    arguments.float_array("w", w, 4)
    weights_layout = arguments.weights_layout(weights_layout)
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
           backend: str | Sequence[str] | Preference = "numpy", target: str = "cpu", *,
           layout: str = "NHWC", groups: int | None = None, device: Any = None, policy: str = "acl",
           rules: Rules | str | None = None, db: Any = None,
           max_workspace_bytes: int | None = None, tune: bool | str = False,
           tune_budget_s: float | None = None) -> Any:
    """Convolve ``x`` (NHWC, or NCHW with ``layout="NCHW"``) with ``w``; same layout out.

    float16 input runs as F16 (half in and out, float32 accumulation); any other float dtype
    runs as F32, and a float64 x says so (a :class:`~convsel.errors.ConversionWarning`: the
    result is float32). Arrays of other libraries that export DLPack or ``__array__`` (a
    PyTorch CPU tensor, JAX, CuPy) are read as numpy, and the result is the caller's kind
    where that costs no copy (else numpy); a ConversionWarning says what was converted.
    See :func:`prepare` for ``algorithm``, ``backend``, fallbacks,
    ``max_workspace_bytes`` and ``tune``. With ``backend="opencl"``, a
    ``pyopencl.array.Array`` x gives one back (see :meth:`PreparedConv.run`). PyTorch's
    ``F.conv2d(x, w)`` is ``conv2d(x, w, layout="NCHW", weights_layout="OIHW")``.
    """
    if device is None and _is_device_array(x):     # x's device: its context must be op's
        device = cast(Any, x).context.devices[0]
    given = [interop.host_array(n, v) for n, v in (("x", x), ("w", w), ("bias", bias))]
    x, w, bias = (g.array for g in given)
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
    y = interop.result(op.run(x), given[0])
    interop.say([g.note for g in given], y)
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
