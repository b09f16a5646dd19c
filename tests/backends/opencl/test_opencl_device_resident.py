"""Device-resident OpenCL runs: pyopencl arrays in and out, against the host path and the
float64 reference, with NaN-poisoned outputs; out=, cl.Buffer input, argument errors, event
ordering, a chain, threads, and the README's example as written."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from algorithm_cases import first_supported, implemented_on
from opencl_support import assert_matches_reference, data, opencl_runtime
from repo import ROOT

from convsel import api
from convsel.errors import InvalidProblemError, UnsupportedError
from convsel.problem import ConvProblem

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")

from convsel.backends.opencl import prepared  # noqa: E402

pytestmark = pytest.mark.opencl

README = ROOT / "README.md"
COMPLETE = cl.command_execution_status.COMPLETE

# Problems with padding or stride, bias and most with a fused activation. Every algorithm
# OpenCL implements runs one: the first of these its constraint accepts, starting at its own
# position in the registry (so that they do not all run the same one).
POOL = (ConvProblem(2, 7, 9, 6, 8, 3, 3, stride=2, pad=1, activation="relu"),
        ConvProblem(2, 6, 6, 8, 12, 1, 1, stride=2, activation="relu"),
        ConvProblem(2, 8, 7, 4, 6, 3, 3, pad=1, activation="leaky_relu(0.1)"),
        ConvProblem(2, 9, 7, 8, 12, 3, 3, pad=(0, 1, 1, 0), activation="hard_swish"),
        ConvProblem(2, 10, 9, 4, 8, 3, 3, pad=1, activation="relu"),
        ConvProblem(1, 9, 8, 5, 7, 3, 3, pad=(1, 1, 0, 2)))
CASES = {a: first_supported(a, POOL, i) for i, a in enumerate(implemented_on("opencl"))}


@pytest.fixture(scope="module")
def rt():
    return opencl_runtime()


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch):
    monkeypatch.setattr(prepared, "OUTPUT_FILL", np.nan)


def make_op(p: ConvProblem, algorithm: str = "direct", seed: int = 0):
    x, w, b = data(p, seed=seed)
    op = api.prepare(p, w, b, algorithm=algorithm, backend="opencl")
    assert op.backend == "opencl", op.fallback
    return op, x, w, b


@contextmanager
def opened(gate):
    """Completes the user event on the way out, even when the test fails: work waiting for
    it would otherwise block the shared queue for every later test."""
    try:
        yield
    finally:
        gate.set_status(COMPLETE)


def fresh_poison(op, shape, dtype=np.float32):
    """A device array already holding values, so a test sees what the run wrote."""
    return cl_array.to_device(op.queue, np.full(shape, 7.0, dtype=dtype))


@pytest.mark.parametrize("dtype", ["F32", "F16"])
@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_device_run_equals_host_run_and_reference(rt, algorithm, dtype):
    p = CASES[algorithm].replace(dtype=dtype)
    op, x, w, b = make_op(p, algorithm)
    host = op.run(x)
    y = op.run(cl_array.to_device(op.queue, x))
    assert isinstance(y, cl_array.Array) and y.shape == p.output_shape
    assert y.dtype == host.dtype
    device = y.get()
    np.testing.assert_array_equal(device, host)      # the same kernels on the same data
    assert_matches_reference(p, x, w, b, device, algorithm)


def test_unwritten_elements_show_the_poison(rt):
    """With no kernel launched the device output is all NaN, in a new array and in out=:
    the poison reaches the caller's buffers too, so a kernel skipping elements fails."""
    op, x, _, _ = make_op(CASES["direct"])
    x_dev = cl_array.to_device(op.queue, x)
    assert np.isfinite(op.run(x_dev).get()).all()
    out = fresh_poison(op, op.problem.output_shape)
    op.kernel.steps = []
    assert np.isnan(op.run(x_dev).get()).all()
    assert np.isnan(op.run(x_dev, out=out).get()).all()


def test_out_is_written_and_returned(rt):
    op, x, w, b = make_op(CASES["im2col_gemm"], "im2col_gemm")
    out = fresh_poison(op, op.problem.output_shape)
    assert op.run(cl_array.to_device(op.queue, x), out=out) is out
    assert_matches_reference(op.problem, x, w, b, out.get(), op.algorithm)


def test_numpy_in_stays_numpy_out_and_takes_out(rt):
    op, x, w, b = make_op(CASES["direct"])
    out = np.full(op.problem.output_shape, np.nan, dtype=np.float32)
    assert op.run(x, out=out) is out
    assert_matches_reference(op.problem, x, w, b, out, op.algorithm)
    with pytest.raises(InvalidProblemError, match="out"):
        op.run(x, out=np.zeros((1, 2, 3, 4), dtype=np.float32))


def test_buffer_input_with_shape(rt):
    op, x, w, b = make_op(CASES["gemm_1x1"], "gemm_1x1")
    buf = cl.Buffer(op.kernel.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=x)
    y = op.run(buf, shape=x.shape)
    assert_matches_reference(op.problem, x, w, b, y.get(), op.algorithm)
    with pytest.raises(InvalidProblemError, match="shape"):
        op.run(buf)
    with pytest.raises(InvalidProblemError, match="shape"):
        op.run(buf, shape=(1, 2, 3, 4))
    with pytest.raises(InvalidProblemError, match="^out=.*Array"):
        op.run(cl_array.to_device(op.queue, x), out=buf)
    small = cl.Buffer(op.kernel.context, cl.mem_flags.READ_WRITE, size=16)
    with pytest.raises(InvalidProblemError, match="^x=.*bytes"):
        op.run(small, shape=x.shape)


def test_arrays_and_queue_on_another_context_are_refused(rt):
    op, x, _, _ = make_op(CASES["direct"])
    other = cl.CommandQueue(cl.Context([rt.device]))
    with pytest.raises(InvalidProblemError, match="^x=.*context"):
        op.run(cl_array.to_device(other, x))
    x_dev = cl_array.to_device(op.queue, x)
    out = cl_array.empty(other, op.problem.output_shape, np.float32)
    with pytest.raises(InvalidProblemError, match="^out=.*context"):
        op.run(x_dev, out=out)
    with pytest.raises(InvalidProblemError, match="^queue=.*context"):
        op.run(x_dev, queue=other)


def test_wrong_shape_dtype_and_layout_are_refused(rt):
    op, x, _, _ = make_op(CASES["direct"])
    q = op.queue
    with pytest.raises(InvalidProblemError, match="^x=.*shape"):
        op.run(cl_array.to_device(q, x[:1]))
    with pytest.raises(InvalidProblemError, match="^x=.*float32"):
        op.run(cl_array.to_device(q, x.astype(np.float64)))
    with pytest.raises(InvalidProblemError, match="^x=.*C-contiguous"):
        op.run(cl_array.to_device(q, np.concatenate([x, x]))[2:])
    x_dev = cl_array.to_device(q, x)
    with pytest.raises(InvalidProblemError, match="^out=.*shape"):
        op.run(x_dev, out=cl_array.empty(q, (1, 1, 1, 1), np.float32))
    with pytest.raises(InvalidProblemError, match="^out=.*float32"):
        op.run(x_dev, out=cl_array.empty(q, op.problem.output_shape, np.float16))
    with pytest.raises(InvalidProblemError, match="^out=.*share"):
        same = ConvProblem(1, 5, 5, 4, 4, 3, 3, pad=1)
        op2, x2, _, _ = make_op(same)
        x2_dev = cl_array.to_device(q, x2)
        op2.run(x2_dev, out=x2_dev)
    nchw, xn, _, _ = make_op(CASES["direct"].replace(layout="NCHW"))
    with pytest.raises(InvalidProblemError, match="^x=.*NCHW shape"):
        nchw.run(cl_array.to_device(q, np.ascontiguousarray(xn.transpose(0, 2, 3, 1))))


NCHW_CASES = {**CASES, "large": ConvProblem(2, 19, 23, 40, 36, 3, 3, pad=1)}   # many tiles


@pytest.mark.parametrize("dtype", ["F32", "F16"])
@pytest.mark.parametrize("case", sorted(NCHW_CASES))
def test_an_nchw_problem_runs_on_nchw_device_arrays(rt, case, dtype):
    """Transposed to NHWC and back on the device: every element of the caller's NaN-filled
    NCHW output is written, equal to the host run and to the float64 reference."""
    p = NCHW_CASES[case].replace(layout="NCHW", dtype=dtype)
    algorithm = "direct" if case == "large" else case
    op, x, w, b = make_op(p, algorithm)
    assert x.shape == p.input_shape == (p.n, p.c, p.h, p.w)
    np_dtype = np.float16 if dtype == "F16" else np.float32
    out = cl_array.to_device(op.queue, np.full(p.output_shape, np.nan, dtype=np_dtype))
    y = op.run(cl_array.to_device(op.queue, x), out=out)
    assert y is out
    result = y.get()
    np.testing.assert_array_equal(result, op.run(x))
    nhwc = (0, 2, 3, 1)     # the float64 reference takes NHWC
    assert_matches_reference(p.replace(layout="NHWC"), x.transpose(nhwc), w, b,
                             result.transpose(nhwc), algorithm)


def test_device_array_on_the_numpy_backend_is_refused(rt):
    p = CASES["direct"]
    x, w, b = data(p)
    op = api.prepare(p, w, b, algorithm="direct", backend="numpy")
    with pytest.raises(UnsupportedError, match="opencl backend"):
        op.run(cl_array.to_device(rt.queue, x))
    with pytest.raises(InvalidProblemError, match="^queue="):
        op.run(x, queue=rt.queue)


def test_run_returns_before_its_wait_for_events_fire(rt):
    """Non-blocking, ordered by wait_for: the run waits for a user event; the input written
    meanwhile (on the array's own queue) is what the run reads."""
    op, x, w, b = make_op(CASES["im2col_gemm"], "im2col_gemm")
    run_queue = cl.CommandQueue(op.kernel.context, properties=op.queue.properties)
    gate = cl.UserEvent(op.kernel.context)
    x_dev = cl_array.to_device(op.queue, np.zeros_like(x))
    with opened(gate):
        y = op.run(x_dev, queue=run_queue, wait_for=[gate])    # would hang if it blocked
        assert y.events[-1].command_execution_status != COMPLETE
        cl.enqueue_copy(op.queue, x_dev.data, x, is_blocking=True)
    assert_matches_reference(op.problem, x, w, b, y.get(), op.algorithm)


def test_run_waits_for_the_input_arrays_events(rt):
    op, x, w, b = make_op(CASES["direct"])
    run_queue = cl.CommandQueue(op.kernel.context, properties=op.queue.properties)
    gate = cl.UserEvent(op.kernel.context)
    x_dev = cl_array.to_device(op.queue, np.zeros_like(x))
    with opened(gate):
        write = cl.enqueue_copy(op.queue, x_dev.data, x, wait_for=[gate], is_blocking=False)
        x_dev.add_event(write)              # as pyopencl's operations record their writes
        y = op.run(x_dev, queue=run_queue)
        assert y.events[-1].command_execution_status != COMPLETE
    assert_matches_reference(op.problem, x, w, b, y.get(), op.algorithm)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_runs_on_two_queues_do_not_share_the_workspace_at_once(rt, layout):
    """im2col's column buffer (and, for NCHW, the NHWC buffers the transposes go through)
    is the op's: a run on a second queue waits for the run in flight on the first, so both
    results are right."""
    op, x, w, b = make_op(CASES["im2col_gemm"].replace(layout=layout), "im2col_gemm")
    x2 = -x
    q2 = cl.CommandQueue(op.kernel.context, properties=op.queue.properties)
    gate = cl.UserEvent(op.kernel.context)
    with opened(gate):
        y1 = op.run(cl_array.to_device(op.queue, x), wait_for=[gate])
        y2 = op.run(cl_array.to_device(q2, x2), queue=q2)
        assert y2.events[-1].command_execution_status != COMPLETE
    np.testing.assert_array_equal(y1.get(), op.run(x))
    np.testing.assert_array_equal(y2.get(), op.run(x2))
    if layout == "NHWC":
        assert_matches_reference(op.problem, x, w, b, y1.get(), op.algorithm)


def test_steps_without_recorded_arguments_go_through_the_ops_buffers(rt):
    """A step not made by bind() cannot take the caller's buffers: the run copies through
    the op's own input and output buffers and still gives the host path's result."""
    op, x, _, _ = make_op(CASES["winograd"], "winograd")
    host = op.run(x)
    for step in op.kernel.steps:
        del step.kernel.bound_args
    out = fresh_poison(op, op.problem.output_shape)
    np.testing.assert_array_equal(op.run(cl_array.to_device(op.queue, x), out=out).get(), host)


def test_chain_on_one_queue_equals_the_host_chain(rt):
    shapes = [(6, 8, 3), (8, 8, 1), (8, 5, 3)]
    ops, rng = [], np.random.default_rng(1)
    for c, k, r in shapes:
        p = ConvProblem(2, 9, 9, c, k, r, r, pad=r // 2, activation="relu")
        w = rng.standard_normal(p.weights_shape).astype(np.float32)
        ops.append(api.prepare(p, w, rng.standard_normal(k).astype(np.float32),
                               algorithm="im2col_gemm" if r == 3 else "gemm_1x1",
                               backend="opencl"))
    assert len({int(op.queue.int_ptr) for op in ops}) == 1
    x = rng.standard_normal((2, 9, 9, 6)).astype(np.float32)
    host, y = x, cl_array.to_device(ops[0].queue, x)
    for op in ops:
        host, y = op.run(host), op.run(y)
    np.testing.assert_array_equal(y.get(), host)


def test_threads_sharing_one_op(rt):
    op, x, w, b = make_op(CASES["winograd"], "winograd")
    inputs = [x * (i + 1) for i in range(4)]
    results: dict[int, list] = {}

    def work(i: int) -> None:
        x_dev = cl_array.to_device(op.queue, inputs[i])
        results[i] = [op.run(x_dev) for _ in range(5)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ys in results.items():
        for y in ys:
            assert_matches_reference(op.problem, inputs[i], w, b, y.get(), op.algorithm)


def test_conv2d_with_a_device_array(rt):
    p = CASES["direct"]
    x, w, b = data(p)
    y = api.conv2d(cl_array.to_device(rt.queue, x), w, b, stride=2, pad=1,
                   activation="relu", algorithm="direct", backend="opencl")
    assert isinstance(y, cl_array.Array)
    assert_matches_reference(p, x, w, b, y.get(), "direct")


def test_readme_device_example_runs_as_written(rt, monkeypatch):
    monkeypatch.setattr(prepared, "OUTPUT_FILL", None)     # as a user runs it
    text = README.read_text(encoding="utf-8")
    section = text.split("### Keeping tensors on the GPU", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)     # its own assert checks the result
    assert isinstance(namespace["y"], cl_array.Array)
    assert [op.backend for op in namespace["ops"]] == ["opencl"] * 3
