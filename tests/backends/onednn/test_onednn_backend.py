"""The onednn backend (oneDNN's direct kernels, the onednn extra): which oneDNN kernel runs a
problem, one prepared kernel in several threads, the library's absence, the device key, and
find/prepare through the front door. Correctness against float64 on every layer shape and
random ones is tests/algorithms/test_correctness.py's (direct-onednn), as for every pair."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

import convsel
from convsel import backends
from convsel.backends.onednn import device_identity, direct, library
from convsel.errors import FallbackWarning
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference
from convsel.tuning.layers import load_layers

needs_onednn = pytest.mark.skipif(not backends.available("onednn").ok,
                                  reason=f"oneDNN not here: {backends.available('onednn').reason}")

STEM = ConvProblem(1, 224, 224, 3, 64, 7, 7, stride=2, pad=3)
POINTWISE = ConvProblem(1, 56, 56, 64, 256, 1, 1)
DEPTHWISE = ConvProblem(1, 56, 56, 144, 144, 3, 3, pad=1, groups=144)
MULTIPLIER = ConvProblem(1, 28, 28, 32, 64, 3, 3, pad=1, groups=32)


@pytest.fixture
def _forget_the_library() -> Iterator[None]:
    """The library is loaded once per process; these tests load it anew, then restore it."""
    library.library.cache_clear()
    direct._probe.cache_clear()
    yield
    library.library.cache_clear()
    direct._probe.cache_clear()


def _data(p: ConvProblem, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32),
            rng.standard_normal(p.weights_shape).astype(np.float32),
            rng.standard_normal(p.k).astype(np.float32))


@needs_onednn
def test_every_shipped_layer_runs_a_direct_kernel_not_a_gemm():
    """oneDNN may offer im2col + GEMM ("gemm:jit") for a direct request; the backend steps
    past it, and the reason names the kernel that runs."""
    layers, _ = load_layers(None, None)
    kernels = set()
    for layer in layers:
        verdict = direct.supports(layer.problem, {})
        assert verdict.ok, (layer.label, verdict.reason)
        kernel = verdict.reason.removeprefix("oneDNN runs it with ")
        assert not kernel.startswith("gemm"), (layer.label, kernel)
        kernels.add(kernel.split(":")[0])
    assert len(layers) > 100 and kernels   # every shipped net's layers were asked


@needs_onednn
@pytest.mark.parametrize("p", [STEM, POINTWISE, DEPTHWISE, MULTIPLIER],
                         ids=["stem", "pointwise", "depthwise", "multiplier"])
def test_the_prepared_kernel_names_its_onednn_kernel(p):
    x, w, b = _data(p)
    kernel = direct.prepare(p, w, b, {})
    assert kernel.impl and not kernel.impl.startswith("gemm")
    assert kernel.impl in repr(kernel)
    y = kernel.run(x)
    scale = float(np.abs(conv2d_reference(p, x, w, b)).max())
    assert np.abs(y - conv2d_reference(p, x, w, b)).max() <= 1e-5 * scale


@needs_onednn
def test_one_prepared_kernel_runs_in_several_threads_at_once():
    """Each thread gets its own stream, argument memories and scratchpad (the service runs a
    prepared layer from its worker threads)."""
    p = ConvProblem(2, 28, 28, 32, 48, 3, 3, pad=1, activation="relu")
    _, w, b = _data(p)
    kernel = direct.prepare(p, w, b, {})
    inputs = [_data(p, seed)[0] for seed in range(6)]
    alone = [kernel.run(x) for x in inputs]
    together: list[np.ndarray | None] = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def work(i: int) -> None:
        start.wait()
        for _ in range(5):
            together[i] = kernel.run(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, y in enumerate(together):
        assert y is not None and np.array_equal(y, alone[i]), i


@needs_onednn
def test_the_device_key_names_onednn_and_the_instruction_set():
    identity = device_identity()
    assert identity["backend"] == "onednn"
    assert identity["driver"].startswith("oneDNN 3.") and "ISA " in identity["driver"]


@needs_onednn
def test_find_times_direct_on_onednn_beside_numpy():
    p = ConvProblem(1, 14, 14, 32, 32, 3, 3, pad=1)
    result = convsel.find(p, backend=["numpy", "onednn"])
    timed = [(e.backend, e.algorithm) for e in result.results if e.status == "ok"]
    assert ("onednn", "direct") in timed and any(b == "numpy" for b, _ in timed)
    others = [e for e in result.results if e.backend == "onednn" and e.algorithm != "direct"]
    assert others and all(e.status == "unsupported" and e.reason for e in others)


@needs_onednn
def test_the_front_door_runs_direct_on_onednn():
    p = ConvProblem(1, 12, 12, 8, 16, 3, 3, pad=1, activation="bounded_relu(6)")
    x, w, b = _data(p)
    op = convsel.prepare(p, w, b, algorithm="direct", backend="onednn")
    assert op.backend == "onednn" and op.fallback is None
    want = conv2d_reference(p, x, w, b)
    assert np.abs(op.run(x) - want).max() <= 1e-5 * float(np.abs(want).max())


@pytest.mark.usefixtures("_forget_the_library")
def test_a_missing_library_says_how_to_get_it_and_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv("CONVSEL_DNNL_LIB", str(tmp_path / "libdnnl.so.3"))
    ready = backends.available("onednn")
    assert not ready.ok and "libdnnl.so.3" in ready.reason
    p = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1)
    x, w, b = _data(p)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = convsel.prepare(p, w, b, algorithm="direct", backend="onednn")
    assert op.backend == "numpy" and "libdnnl.so.3" in str(op.fallback)
    assert any(issubclass(c.category, FallbackWarning) for c in caught)
    np.testing.assert_allclose(op.run(x), conv2d_reference(p, x, w, b), rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("activation", [
    "relu", "bounded_relu(4)", "lu_bounded_relu(3, -1)", "leaky_relu(0.2)", "linear(0.5, 1)",
    "logistic", "tanh(2, 0.5)", "elu(0.7)", "swish(1.5)", "hard_swish", "abs"])
def test_every_activation_is_fused_as_acl_defines_it(activation):
    """Each ACL activation becomes oneDNN post-ops (tanh's a and b as linear steps around
    it); parameters other than the defaults, so a dropped or swapped one shows."""
    from convsel.activation import KINDS

    p = ConvProblem(1, 10, 10, 8, 12, 3, 3, pad=1, activation=activation)
    assert {p.activation.kind} <= set(KINDS)
    x, w, b = _data(p, 3)
    want = conv2d_reference(p, x, w, b)
    got = direct.prepare(p, w, b, {}).run(x)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_the_post_ops_cover_every_activation_kind():
    from convsel.activation import KINDS, Activation

    for kind in KINDS:
        assert direct.post_ops(Activation(kind, 1.0, 2.0)), kind


@needs_onednn
def test_set_threads_governs_the_layers_prepared_after_it():
    """convsel's thread count (numpy's set_threads) reaches oneDNN's OpenMP pool: a layer
    prepared under one thread sizes its per-thread scratchpad for one, and runs so; unset,
    OpenMP keeps its own start-up count."""
    from convsel.backends.numpy import threads

    p = ConvProblem(1, 56, 56, 64, 64, 1, 1)
    x, w, b = _data(p)
    before = threads.chosen_threads()
    with threads.limited_threads(1):
        one = direct.prepare(p, w, b, {})
        assert one.threads == 1 and threads.chosen_threads() == 1
        y_one = one.run(x)
    assert threads.chosen_threads() == before   # the block left no setting behind
    with threads.limited_threads(4):
        four = direct.prepare(p, w, b, {})
    assert four.threads == 4 and four.scratch_bytes > one.scratch_bytes
    np.testing.assert_allclose(four.run(x), y_one, rtol=1e-6, atol=1e-5)


@needs_onednn
@pytest.mark.usefixtures("_forget_the_library")
def test_a_kernel_whose_scratchpad_exceeds_the_estimate_is_refused(monkeypatch):
    """The workspace estimate's scratchpad bound holds: support and prepare both refuse a
    kernel above it (here a bound of 1 byte), naming the bytes."""
    from convsel.errors import UnsupportedError

    monkeypatch.setattr(direct, "ONEDNN_SCRATCHPAD_BOUND", 1)
    x, w, b = _data(POINTWISE)
    verdict = direct.supports(POINTWISE, {})
    assert not verdict.ok and "scratchpad" in verdict.reason
    with pytest.raises(UnsupportedError, match="scratchpad"):
        direct.prepare(POINTWISE, w, b, {})
