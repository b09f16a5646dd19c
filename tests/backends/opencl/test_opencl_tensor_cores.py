"""Tensor cores from OpenCL (backends/opencl/mma.py, implicit_gemm_mma.py).

Three kinds of test:
- everywhere: TF32 never runs without fast math, whatever asks for it; a device without
  tensor cores refuses the variants with a reason (never a build error);
- everywhere: the kernel with its mma.sync emulated (the same fragments exchanged through
  local memory; ldmatrix and cp.async as plain loads, ``emulate=True``) against float64 on
  the operands as the kernel rounds them, to float32 accuracy: this checks the kernel's
  gathering, fragment and epilogue indexing on any device, PoCL's CPU device included;
- on a device with tensor cores (skipped elsewhere, with the probe's reason): every
  declared variant, natively, on every distinct ResNet-50 layer and on random shapes,
  against float64 on the exact inputs within :func:`mma.error_bound` (its docstring states
  the formula), outputs NaN-poisoned. Run on the H100 with ``-s`` for the log committed under
  benchmarks/results/.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from opencl_support import opencl_runtime

import convsel
from convsel import algorithms, api, finder
from convsel.algorithms.winograd import winograd_tiles
from convsel.errors import FallbackWarning, UnsupportedError
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference
from convsel.rules import default_rules
from convsel.tuning.layers import Layer, distinct, load_layers

pytest.importorskip("pyopencl")

from convsel.backends.numpy import winograd as winograd_numpy  # noqa: E402
from convsel.backends.opencl import implicit_gemm as ig  # noqa: E402
from convsel.backends.opencl import implicit_gemm_mma as igm  # noqa: E402
from convsel.backends.opencl import mma, prepared  # noqa: E402
from convsel.backends.opencl import winograd as wg  # noqa: E402

RULES = default_rules()
U32 = 2.0**-24


@pytest.fixture(autouse=True)
def _nan_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepared, "OUTPUT_FILL", np.nan)


@pytest.fixture()
def rt():
    return opencl_runtime()


def tensor_core_runtime():
    runtime = opencl_runtime()
    verdict = mma.tensor_cores(runtime)
    if not verdict.ok:
        pytest.skip(f"no tensor cores here: {verdict.reason}")
    return runtime


# -- TF32 only under fast math ---------------------------------------------------------------
F32_EXACT = ConvProblem(1, 6, 5, 16, 24, 3, 3, pad=1)
F32_FAST = F32_EXACT.replace(fast_math=True)


def _tf32_labels(labels):
    return [label for label in labels if "tf32" in label]


def test_no_tf32_variant_is_offered_without_fast_math():
    """By any algorithm (implicit_gemm and winograd have TF32 variants)."""
    layers, _ = load_layers(None, None)
    checked = dict.fromkeys(algorithms.ALGORITHMS, 0)
    for layer in distinct(layers):
        p = layer.problem.replace(dtype="F32", fast_math=False)
        for alg in algorithms.ALGORITHMS:
            variants = algorithms.variants(alg, p, RULES)
            assert not [v for v in variants if v.get("math") == "tf32"], (alg, layer.label)
            fast = algorithms.variants(alg, p.replace(fast_math=True), RULES)
            checked[alg] += any(v.get("math") == "tf32" for v in fast)
    # the same layers with fast math do offer TF32
    assert checked["implicit_gemm"] > 20 and checked["winograd"] > 10, checked


def test_tf32_is_refused_for_a_problem_without_fast_math(rt):
    params = {"math": "tf32", "mma": (64, 64, 2, 2)}
    for verdict in (algorithms.supports("implicit_gemm", F32_EXACT, RULES, params),
                    ig.supports(F32_EXACT, params, rt),
                    igm.supports(F32_EXACT, params, rt, emulate=True)):
        assert not verdict.ok and "fast_math" in verdict.reason
    with pytest.raises(UnsupportedError, match="fast_math"):
        igm.prepare(F32_EXACT, np.ones(F32_EXACT.weights_shape, np.float32), None, params, rt,
                    emulate=True)


def test_prepare_never_runs_tf32_without_fast_math():
    """Named with its parameters, TF32 is an UnsupportedError before any backend is tried
    (and no fallback runs something else instead)."""
    p = F32_EXACT
    w = np.ones(p.weights_shape, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for backend in ("opencl", "numpy"):
            for params in ({"math": "tf32"}, {"math": "tf32", "mma": (64, 64, 2, 2)}):
                with pytest.raises(UnsupportedError, match="fast_math"):
                    api.prepare(p, w, algorithm="implicit_gemm", params=params,
                                backend=backend)


def test_the_measured_policy_never_carries_a_tf32_answer_over_to_exact_math(tmp_path, rt):
    """A TF32 winner recorded for the fast-math problem is not the answer for the same shape
    without fast math (fast_math is part of the database key), nor for ACL's policy."""
    from convsel.tuning.db import TuningDB, TuningEntry
    from convsel.tuning.measure import decide, device_identity

    label = algorithms.label_of("implicit_gemm", {"math": "tf32", "mma": (64, 64, 2, 2)})
    timings = {label: {"algorithm": "implicit_gemm",
                       "params": {"math": "tf32", "mma": [64, 64, 2, 2]}, "median_s": 1e-4,
                       "iqr_s": 0.0, "runs": 5, "min_s": 1e-4, "pruned": False},
               "direct": {"algorithm": "direct", "params": {}, "median_s": 1e-2,
                          "iqr_s": 0.0, "runs": 5, "min_s": 1e-2, "pruned": False}}
    db = TuningDB(tmp_path / "tuning.sqlite")
    winner, tie = decide(timings)
    db.record(TuningEntry(problem=F32_FAST, backend="opencl",
                          device=device_identity("opencl"), winner=winner, tie=tie,
                          timings=timings))
    fast = convsel.choose(F32_FAST, "cpu", policy="measured", backend="opencl", db=db)
    assert fast.params.get("math") == "tf32"           # the entry is found and used
    for policy, options in (("measured", {"backend": "opencl", "db": db}), ("acl", {})):
        for target in ("cpu", "G78"):
            sel = convsel.choose(F32_EXACT, target, policy=policy, **options)
            assert sel.params.get("math") != "tf32", (policy, target, sel)


def test_find_lists_no_tf32_without_fast_math_and_explains_it_with(rt):
    """find times every candidate: without fast math no TF32 one exists; with it, on a device
    without tensor cores, each TF32 candidate is listed as not run, with the reason."""
    exact = finder.find(F32_EXACT, backend="opencl", budget_s=20)
    assert not _tf32_labels(r.label for r in exact.results)
    assert all(r.params.get("math") is None for r in exact.results)
    fast = finder.find(F32_FAST, backend="opencl", budget_s=20)
    tf32 = [r for r in fast.results if r.params.get("math") == "tf32"]
    assert tf32 and all("math=tf32" in r.label for r in tf32)
    if not mma.tensor_cores(rt).ok:
        assert all(r.status != "ok" and "tensor cores" in r.reason for r in tf32), \
            [(r.label, r.status, r.reason) for r in tf32]


# -- capability ----------------------------------------------------------------------------------
def test_the_probe_answers_with_a_reason_and_never_raises(rt):
    verdict = mma.tensor_cores(rt)
    assert verdict.reason
    assert mma.tensor_cores(rt) is verdict                   # probed once per device
    if "NVIDIA" not in rt.device.platform.name.upper():
        assert not verdict.ok and "NVIDIA" in verdict.reason
        refused = ig.supports(F32_FAST, {"math": "tf32"}, rt)
        assert not refused.ok and "no tensor cores" in refused.reason


@pytest.mark.parametrize("math_mode", mma.MATH_MODES)
def test_the_probes_operands_and_layout_agree_with_numpy(rt, math_mode):
    """The probe's packing of A, B (and the fragment places of mma.cl) through the emulated
    mma: exact small-integer products. On an NVIDIA device the same probe runs natively."""
    d = mma.run_probe(rt, math_mode, emulate=True)
    np.testing.assert_array_equal(d.astype(np.float64), mma.probe_operands(math_mode)[2])


def test_error_bound_grows_with_the_reduction_and_knows_its_modes():
    small = mma.error_bound("tf32", "F32", 9)
    big = mma.error_bound("tf32", "F32", 4608)
    assert 2 * mma.U_TF32 < small < big < 4e-3
    assert mma.error_bound("f16", "F16", 9) > mma.U_F16
    assert mma.error_bound("f16", "F32", 9) < small        # halves in: no input rounding
    with pytest.raises(ValueError, match="math"):
        mma.error_bound("fp8", "F32", 9)


# -- the kernel, its mma emulated ------------------------------------------------------------------
def tf32_round(a: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 on finite float32: nearest, ties away from zero, 10 fraction bits."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _data(p: ConvProblem, seed: int, bias: bool = True):
    """x, w, and a bias (zeros when ``bias`` is off: the kernel is then built without one,
    as benchmarks/gpu.py builds it, so both share the device's compiled programs)."""
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal(p.input_shape).astype(dtype)
    w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(dtype)
    b = rng.standard_normal(p.k).astype(dtype) if bias else np.zeros(p.k, dtype)
    return x, w, b


def _scale(p: ConvProblem, x, w, b) -> np.ndarray:
    """Per output: sum |x|*|w| + |bias|, what rounding errors are proportional to."""
    return conv2d_reference(p.replace(activation=None), np.abs(x.astype(np.float64)),
                            np.abs(w.astype(np.float64)), np.abs(b.astype(np.float64)))


def _run(p, params, runtime, seed=0, emulate=False):
    x, w, b = _data(p, seed)
    kernel = igm.prepare(p, w, b, params, runtime, emulate=emulate)
    # the pure estimate a workspace limit is checked against bounds what the kernel holds
    estimate = algorithms.workspace_bytes("implicit_gemm", p, params, "opencl")
    assert estimate >= kernel.workspace_bytes, (p, params, estimate, kernel.workspace_bytes)
    y = kernel.run(x).astype(np.float64)
    assert np.isfinite(y).all(), f"{p} {params}: unwritten or non-finite outputs"
    return x, w, b, y, kernel


EMULATED = [   # small shapes reaching every path: vector and word loads, flat reductions, tails
    ConvProblem(2, 9, 7, 16, 40, 3, 3, pad=1, activation="relu", fast_math=True),
    ConvProblem(1, 11, 10, 5, 10, 3, 2, stride=(2, 1), pad=(1, 0, 1, 1), dilation=(2, 1),
                fast_math=True),
    ConvProblem(1, 15, 13, 3, 16, 7, 7, stride=2, pad=3, fast_math=True),        # flat reduction
    ConvProblem(2, 6, 6, 24, 12, 1, 1, stride=2, fast_math=True),
    ConvProblem(2, 9, 7, 16, 40, 3, 3, pad=1, activation="relu", dtype="F16"),
    ConvProblem(1, 11, 10, 5, 10, 3, 2, stride=(2, 1), pad=(1, 0, 1, 1), dilation=(2, 1),
                dtype="F16"),
    ConvProblem(1, 15, 13, 3, 16, 7, 7, stride=2, pad=3, dtype="F16"),
    # flat reduction with dilated taps in both directions, R = 36 (not a whole slice)
    ConvProblem(1, 12, 14, 4, 16, 3, 3, pad=2, dilation=2, fast_math=True),
    ConvProblem(1, 12, 14, 3, 16, 3, 3, pad=2, dilation=2, dtype="F16"),
]


def _math(p: ConvProblem) -> str:
    return "f16" if p.dtype == "F16" else "tf32"


def _tight_check(p, params, runtime, x, w, b, y, splits):
    """Against float64 on the operands the kernel multiplies (TF32-rounded for tf32): only
    float32 accumulation (at most R + splits + 2 additions, each within 2^-24, the emulation
    rounding to nearest) and, for F16, the output's rounding (2^-11) remain."""
    if p.dtype == "F32":
        xr, wr = tf32_round(x), tf32_round(w)
    else:
        xr, wr = x, w
    ref = conv2d_reference(p, xr, wr, b)
    scale = _scale(p, xr, wr, b)
    gamma = (p.kh * p.kw * p.c + splits + 2) * U32 * 1.01
    allowed = gamma * scale + (2.0**-11 * np.abs(ref) if p.dtype == "F16" else 0.0)
    worst = float(np.max(np.abs(y - ref) - allowed))
    assert worst <= 0, f"{p} {params}: error beyond float32 accumulation by {worst:.2e}"


@pytest.mark.parametrize("p", EMULATED, ids=str)
def test_emulated_kernel_matches_float64_to_float32_accuracy(rt, p):
    checked = 0
    cases = [{"mma": (32, 32, 1, 1)},                                   # slice 32, 2 stages
             {"mma": (32, 64, 1, 2), "split": 2, "slice": 16},
             {"mma": (32, 32, 1, 1), "stages": 1, "slice": 16}]
    for extra in cases:
        params = {"math": _math(p), **extra}
        if "split" in extra:    # a flat reduction of R <= 32 halves is one slice: no split
            one = igm.configure(p, {**params, "split": 1}, rt, emulate=True)
            params["split"] = min(extra["split"], one.slices)
        x, w, b, y, kernel = _run(p, params, rt, emulate=True)
        splits = igm.configure(p, params, rt, emulate=True).splits
        _tight_check(p, params, rt, x, w, b, y, splits)
        ref = conv2d_reference(p, x, w, b)
        bound = mma.error_bound(params["math"], p.dtype, p.kh * p.kw * p.c, splits)
        assert np.max(np.abs(y - ref) / _scale(p, x, w, b)) <= bound
        checked += 1
    assert checked == len(cases)


def test_a_declared_tile_of_several_warps_emulated(rt):
    """Warps side by side in both directions, a tile bigger than the problem."""
    p = EMULATED[0]
    params = {"math": "tf32", "mma": (64, 64, 2, 2)}
    x, w, b, y, _ = _run(p, params, rt, emulate=True)
    _tight_check(p, params, rt, x, w, b, y, 1)


@pytest.mark.parametrize("ldmatrix", [True, False], ids=["ldmatrix", "pair-loads"])
def test_both_fragment_loads_emulated(rt, monkeypatch, ldmatrix):
    """ldmatrix on the 16-byte swizzle (an odd count of B fragments ending with an x2 load)
    and 64-bit pair loads on the 8-byte one make the same products; tiles whose load units
    do not fill whole rows of the tile (BN 24, 40) check the staging's row steps; an odd K,
    the epilogue's one-by-one stores (even K: pairs)."""
    monkeypatch.setattr(igm, "LDMATRIX", ldmatrix)
    for p in (EMULATED[0], EMULATED[4], EMULATED[4].replace(k=13)):
        for extra in ({"mma": (32, 24, 1, 1)}, {"mma": (64, 40, 2, 1), "slice": 16}):
            params = {"math": _math(p), **extra}
            kernel_options = igm.build_options(p, igm.configure(p, params, rt, emulate=True),
                                               None, emulate=True)
            assert f"-DLDSM={int(ldmatrix)}" in kernel_options
            x, w, b, y, _ = _run(p, params, rt, emulate=True)
            _tight_check(p, params, rt, x, w, b, y, 1)


@pytest.mark.parametrize("frag2", [True, False], ids=["frag2", "frag1"])
def test_fragment_double_buffering_emulated(rt, monkeypatch, frag2):
    """FRAG2 (the next k-step's fragments loaded before this one is multiplied) makes the same
    products through both fragment loads and both pipelines, at one k-step per slice (TF32
    16-word slices: two k-steps; F16: two) and more."""
    monkeypatch.setattr(igm, "FRAG2", frag2)
    for ldmatrix in (True, False):
        monkeypatch.setattr(igm, "LDMATRIX", ldmatrix)
        for p in (EMULATED[0], EMULATED[4]):
            for extra in ({"mma": (32, 24, 1, 1)}, {"mma": (64, 40, 2, 1), "slice": 16},
                          {"mma": (32, 64, 1, 2), "load": "async", "stages": 3}):
                params = {"math": _math(p), **extra}
                options = igm.build_options(p, igm.configure(p, params, rt, emulate=True),
                                            None, emulate=True)
                assert f"-DFRAG2={int(frag2)}" in options
                x, w, b, y, _ = _run(p, params, rt, emulate=True)
                _tight_check(p, params, rt, x, w, b, y, 1)


def test_tf32_weights_rounded_on_the_host_as_the_kernel_rounds_them():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(4096).astype(np.float32) * np.float32(1e3)
    # ties (the dropped 13 bits exactly 0x1000) go away from zero, as cvt.rna
    ties = (np.array([1.0, -1.0, 3.0], np.float32).view(np.uint32) | np.uint32(0x1000))
    w = np.concatenate([w, ties.view(np.float32), np.float32([np.inf, -np.inf, 0.0, -0.0])])
    np.testing.assert_array_equal(igm.tf32_rounded(w).view(np.uint32),
                                  tf32_round(w).view(np.uint32))
    assert (igm.tf32_rounded(w).view(np.uint32) & np.uint32(0x1FFF) == 0).all()
    nan = np.float32([1.0]).view(np.uint32) | np.uint32(0x7F800001)     # payload in low bits
    assert np.isnan(igm.tf32_rounded(nan.view(np.float32))).all()
    assert (igm.tf32_rounded(nan.view(np.float32)).view(np.uint32) & np.uint32(0x1FFF) == 0).all()


@pytest.mark.parametrize("round_weights", [True, False], ids=["host-rounded", "kernel-rounded"])
def test_tf32_weights_rounded_on_the_host_or_in_the_kernel_agree(rt, monkeypatch,
                                                                 round_weights):
    """B rounded once on the host (B_ROUNDED) or by the kernel, both pipelines: the same
    products as float64 on the TF32-rounded operands."""
    monkeypatch.setattr(igm, "ROUND_WEIGHTS", round_weights)
    p = EMULATED[0]
    for extra in ({"mma": (32, 24, 1, 1)}, {"mma": (32, 64, 1, 2), "load": "async"}):
        params = {"math": "tf32", **extra}
        options = igm.build_options(p, igm.configure(p, params, rt, emulate=True), None,
                                    emulate=True)
        assert ("-DB_ROUNDED" in options) == round_weights
        x, w, b, y, _ = _run(p, params, rt, emulate=True)
        _tight_check(p, params, rt, x, w, b, y, 1)


def test_warp_tiles_of_32x32_in_big_work_groups_emulated(rt):
    """(128, 64, 4, 2) and (64, 128, 2, 4): eight warps of 32x32, each work-item staging
    fewer rows than it has warps' worth (RSTEP below the tile), in both pipelines."""
    for p in (EMULATED[0], EMULATED[4]):
        for tile in ((128, 64, 4, 2), (64, 128, 2, 4)):
            for extra in ({}, {"load": "async"}):
                params = {"math": _math(p), "mma": tile, **extra}
                x, w, b, y, _ = _run(p, params, rt, emulate=True)
                _tight_check(p, params, rt, x, w, b, y, 1)


@pytest.mark.parametrize("load", ["registers", "async"])
def test_sliced_k_emulated(rt, monkeypatch, load):
    """warps_k 2: two warps per warp tile, each multiplying half of every slice's k-steps
    (one of two at 16 words in TF32), their partial sums added through local memory; with
    both fragment loads and FRAG2, and split-K on top."""
    for frag2, ldmatrix in ((False, True), (True, True), (False, False)):
        monkeypatch.setattr(igm, "FRAG2", frag2)
        monkeypatch.setattr(igm, "LDMATRIX", ldmatrix)
        for p in (EMULATED[0], EMULATED[4], EMULATED[3]):
            for extra in ({"mma": (32, 24, 1, 1), "warps_k": 2},
                          {"mma": (64, 64, 2, 2), "warps_k": 2, "slice": 16},
                          {"mma": (32, 64, 1, 2), "warps_k": 2, "split": 2}):
                params = {"math": _math(p), "load": load, **extra}
                if "split" in extra:      # a 1x1 layer of 24 channels is one slice: no split
                    one = igm.configure(p, {**params, "split": 1}, rt, emulate=True)
                    params["split"] = min(extra["split"], one.slices)
                config = igm.configure(p, params, rt, emulate=True)
                assert config.threads == 64 * extra["mma"][2] * extra["mma"][3]
                assert config.partial_sums == 2 * config.splits
                x, w, b, y, kernel = _run(p, params, rt, emulate=True)
                _tight_check(p, params, rt, x, w, b, y, config.partial_sums)


@pytest.mark.parametrize("stage_out", [True, False], ids=["staged-out", "fragment-out"])
def test_output_tile_through_local_memory_or_from_the_fragments_emulated(rt, monkeypatch,
                                                                          stage_out):
    """STAGE_OUT: the finished tile (bias, activation, F16 rounding) stored from local memory
    in 16-byte runs where K is a multiple of the run (4 floats, 8 halves), value by value
    where not (K = 13, 10), for tiles bigger than the problem and with sliced K; or from the
    fragments as before."""
    monkeypatch.setattr(igm, "STAGE_OUT", stage_out)
    for p in (EMULATED[0], EMULATED[4], EMULATED[4].replace(k=13), EMULATED[1]):
        for extra in ({"mma": (32, 24, 1, 1)}, {"mma": (64, 64, 2, 2), "load": "async"},
                      {"mma": (32, 64, 1, 2), "warps_k": 2}):
            params = {"math": _math(p), **extra}
            if p.c % 8 and extra.get("load") == "async":
                params.pop("load")                 # 5 channels: word loads, registers only
            config = igm.configure(p, params, rt, emulate=True)
            assert f"-DSTAGE_OUT={int(stage_out)}" in igm.build_options(p, config, None, True)
            x, w, b, y, _ = _run(p, params, rt, emulate=True)
            _tight_check(p, params, rt, x, w, b, y, config.partial_sums)


def test_sliced_k_is_checked_with_its_reason():
    p = F32_FAST
    for params, why in (({"mma": (64, 64, 2, 2), "warps_k": 3}, "warps_k must be 1 or 2"),
                        ({"mma": (128, 128, 4, 4), "warps_k": 2}, "at most 16"),
                        ({"mma": (256, 256, 2, 2), "warps_k": 2}, "partial sums need")):
        verdict = algorithms.supports("implicit_gemm", p, RULES, {"math": "tf32", **params})
        assert not verdict.ok and why in verdict.reason, verdict.reason


def test_cp_async_emulated(rt):
    """cp.async (copies straight to local memory, TF32 rounded at the fragments) runs
    emulated as plain copies: its indexing checked like the registers path; with no load
    named the kernel stages through registers; word loads (C not a multiple of 4) refuse it."""
    for p in (EMULATED[0], EMULATED[4]):
        for extra in ({"mma": (32, 64, 1, 2), "stages": 3, "slice": 16},
                      {"mma": (64, 40, 2, 1), "stages": 2}):
            params = {"math": _math(p), "load": "async", **extra}
            config = igm.configure(p, params, rt, emulate=True)
            assert config.load == "async" and config.stages == extra["stages"]
            x, w, b, y, _ = _run(p, params, rt, emulate=True)
            _tight_check(p, params, rt, x, w, b, y, config.splits)
    config = igm.configure(EMULATED[0], {"math": "tf32", "mma": (64, 64, 2, 2)}, rt,
                           emulate=True)
    assert config.load == "registers" and config.slice_words == 32 and config.stages == 2
    few = ConvProblem(1, 8, 8, 6, 16, 3, 3, pad=1, fast_math=True)     # 6 channels: word loads
    refused = igm.supports(few, {"math": "tf32", "load": "async"}, rt, emulate=True)
    assert not refused.ok and "16 bytes" in refused.reason


@pytest.mark.parametrize("roll", [False, True], ids=["unrolled", "rolled"])
def test_64x64_warp_tiles_and_rolled_k_steps_emulated(rt, monkeypatch, roll):
    """v7: work-groups of one, two and four 64x64-warp tiles (many load units per work-item,
    RSTEP not a multiple of 8 rows for one warp), a slice's k-steps rolled (ROLL_KSTEPS) or
    not, B's copies through L2 only apart from A's (CP_ASYNC_L1_B, with the rolled builds);
    the build options follow the knobs."""
    monkeypatch.setattr(igm, "ROLL_KSTEPS", roll)
    monkeypatch.setattr(igm, "CP_ASYNC_L1_B", False if roll else None)
    p = ConvProblem(2, 9, 11, 64, 72, 3, 3, pad=1, fast_math=True)
    for q in (p, p.replace(dtype="F16")):
        for tile in ((64, 64, 1, 1), (128, 64, 2, 1), (64, 128, 1, 2), (256, 64, 4, 1)):
            params = {"math": _math(q), "mma": tile, "load": "async", "slice": 32,
                      "stages": 2}
            config = igm.configure(q, params, rt, emulate=True)
            options = igm.build_options(q, config, None, emulate=True)
            assert ("-DROLL_K" in options) == roll
            assert ("-DCP_L1_B=0" in options) == roll
            assert not any(o.startswith("-DCP_L1_B") for o in options) or roll
            x, w, b, y, _ = _run(q, params, rt, emulate=True)
            _tight_check(q, params, rt, x, w, b, y, config.splits)


def test_tap_masks_emulated(rt, monkeypatch):
    """TAP_MASK: each A row's pixel bounds found once per tap (taps of several slices, a
    split starting inside a tap, padding on every side, rows past M) and kept as bits."""
    monkeypatch.setattr(igm, "TAP_MASK", True)
    p = ConvProblem(2, 7, 9, 64, 40, 3, 3, stride=(1, 2), pad=(1, 2, 2, 1), fast_math=True)
    for q in (p, p.replace(dtype="F16", c=128)):
        for extra in ({"mma": (64, 64, 2, 2), "slice": 16, "stages": 3},
                      {"mma": (32, 64, 1, 2), "slice": 16, "stages": 2, "split": 5}):
            params = {"math": _math(q), "load": "async", **extra}
            config = igm.configure(q, params, rt, emulate=True)
            assert "-DTAP_MASK" in igm.build_options(q, config, None, emulate=True)
            x, w, b, y, _ = _run(q, params, rt, emulate=True)
            _tight_check(q, params, rt, x, w, b, y, config.splits)


STEMS = [EMULATED[2], EMULATED[6], EMULATED[8],
         EMULATED[8].replace(dtype="F32", fast_math=True), EMULATED[8].replace(c=6)]


@pytest.mark.parametrize("pad", [0, 4, 8])
def test_padded_stem_emulated(rt, monkeypatch, pad):
    """PAD_STEM: the flat stem's input padded to whole-pixel load units by the pad step (its
    weights with zero channels on the host), staged by registers, by cp.async (8- or 16-byte
    copies) and split; unpadded (0) the word gather, where cp.async is refused."""
    monkeypatch.setattr(igm, "PAD_STEM", pad)
    for p in STEMS:
        want = p.c if not pad else 4 if p.dtype == "F32" else pad if p.c <= pad else 8
        for extra in ({"mma": (32, 32, 1, 1)},
                      {"mma": (32, 64, 1, 2), "load": "async", "slice": 16, "stages": 3},
                      {"mma": (32, 64, 1, 2), "load": "async", "split": 2, "slice": 16},
                      {"mma": (64, 32, 2, 1), "split": 2, "slice": 16}):
            params = {"math": _math(p), **extra}
            if "split" in extra:        # a reduction of one slice has no split
                one = igm.configure(p, {**params, "split": 1, "load": "registers"}, rt, True)
                params["split"] = min(extra["split"], one.slices)
            if not pad and extra.get("load") == "async":
                assert "8-byte" in igm.supports(p, params, rt, emulate=True).reason
                continue
            config = igm.configure(p, params, rt, emulate=True)
            assert config.flat and config.channels == want
            x, w, b, y, kernel = _run(p, params, rt, emulate=True)
            assert (kernel.steps[0].name == "pad_channels") == (want != p.c)
            _tight_check(p, params, rt, x, w, b, y, config.splits)
            ref = conv2d_reference(p, x, w, b)
            bound = mma.error_bound(params["math"], p.dtype, p.kh * p.kw * p.c, config.splits)
            assert np.max(np.abs(y - ref) / _scale(p, x, w, b)) <= bound


@pytest.mark.parametrize("group_m", [None, 3])
def test_grouped_block_order_emulated(rt, monkeypatch, group_m):
    """GROUP_M: the work-groups' order regrouped along M (a last group of fewer block rows,
    several block columns, split-K) covers every output tile once."""
    monkeypatch.setattr(igm, "GROUP_M", group_m)
    for p in (EMULATED[0].replace(n=3), EMULATED[4].replace(n=3)):
        for extra in ({"mma": (32, 32, 1, 1)}, {"mma": (32, 32, 1, 1), "split": 2}):
            params = {"math": _math(p), **extra}
            config = igm.configure(p, params, rt, emulate=True)
            assert ("-DGROUP_M=3" in igm.build_options(p, config, None, True)) == bool(group_m)
            x, w, b, y, _ = _run(p, params, rt, emulate=True)
            _tight_check(p, params, rt, x, w, b, y, config.splits)


# 1x1 (rows past M only: NO_BOUNDS) and C whole slices (C_WHOLE), M with a tail; a padded,
# strided 3x3 (bounds kept; C_WHOLE only where C is whole slices)
SPECIALISED = [ConvProblem(2, 5, 7, 64, 24, 1, 1, fast_math=True),
               ConvProblem(1, 7, 6, 32, 16, 3, 3, stride=2, pad=(1, 0, 0, 1), fast_math=True)]


@pytest.mark.parametrize("issue_at", [1, 3])
def test_specialised_builds_and_copies_issued_mid_slice_emulated(rt, monkeypatch, issue_at):
    """SPECIALISE drops the checks a problem cannot fail, ISSUE_AT issues the next slice's
    copies after that many k-steps (clamped to the slice's last): the same products, through
    cp.async in 32- and 16-word slices and through registers (where ISSUE_AT does not apply)."""
    monkeypatch.setattr(igm, "ISSUE_AT", issue_at)
    for base in SPECIALISED:
        for p in (base, base.replace(dtype="F16", fast_math=False)):
            for extra in ({"mma": (32, 64, 1, 2), "load": "async", "slice": 32},
                          {"mma": (64, 32, 2, 1), "load": "async", "slice": 16, "stages": 3},
                          {"mma": (32, 32, 1, 1), "load": "registers", "slice": 16}):
                params = {"math": _math(p), **extra}
                config = igm.configure(p, params, rt, emulate=True)
                options = igm.build_options(p, config, None, True)
                assert ("-DNO_BOUNDS" in options) == (p.kh * p.kw == 1)
                whole = p.c % (config.slice_words * igm.elements_per_word(config.math)) == 0
                assert ("-DC_WHOLE" in options) == whole
                ksteps = config.slice_words // 8
                at = min(issue_at, ksteps - 1) if config.load == "async" else 0
                assert (f"-DISSUE_AT={at}" in options) == (at > 0)
                x, w, b, y, _ = _run(p, params, rt, emulate=True)
                _tight_check(p, params, rt, x, w, b, y, config.splits)


@pytest.mark.parametrize("load", ["async", "registers"])
def test_64_word_slices_and_deep_pipelines_emulated(rt, load):
    """64-word slices (128 halves, 8 k-steps of TF32, 4 of F16: the swizzle's XOR on each
    half of a 256-byte row) and 3-4 cp.async stages of 32 words: the same products, with a
    channel tail (C = 40: part of a slice) and a tile bigger than the problem."""
    for p in (EMULATED[0], EMULATED[4], EMULATED[0].replace(c=64, activation=None)):
        for extra in ({"mma": (64, 64, 2, 2), "slice": 64, "stages": 2},
                      {"mma": (32, 64, 1, 2), "slice": 32,
                       "stages": 4 if load == "async" else 2}):
            params = {"math": _math(p), "load": load, **extra}
            config = igm.configure(p, params, rt, emulate=True)
            assert (config.slice_words, config.stages) == (extra["slice"], extra["stages"])
            x, w, b, y, _ = _run(p, params, rt, emulate=True)
            _tight_check(p, params, rt, x, w, b, y, config.splits)


def test_local_memory_beyond_the_reported_size_only_where_probed(rt, monkeypatch):
    """Without tensor cores the limit is the device's reported local memory. The measured
    pipelines (ASYNC_PIPELINES) apply where local memory holds them and the slice is no
    wider than a tap; else, and for other tiles, the widest slice leaving 2 stages, up to 4."""
    if not mma.tensor_cores(rt).ok:
        assert igm.local_memory_limit(rt) == int(rt.device.local_mem_size)
    big, small = 192 * 1024, 48 * 1024
    monkeypatch.setattr(igm, "ASYNC_PIPELINES", {(128, 128, 2, 2): (32, 2)})
    assert igm.pipeline((128, 128, 2, 2), {"load": "async"}, big) == (32, "async", 2)
    assert igm.pipeline((128, 128, 2, 2), {"load": "async"}, small) == (16, "async", 3)
    assert igm.pipeline((128, 128, 2, 2), {"load": "async"}, big, channels=16,
                        per_word=2) == (32, "async", 4)       # 64 halves per slice > C = 16
    assert igm.pipeline((128, 128, 2, 2), {"load": "async", "stages": 3}, big) == \
        (32, "async", 3)
    assert igm.pipeline((128, 64, 2, 2), {"load": "async"}, big) == (32, "async", 4)
    assert igm.pipeline((128, 64, 2, 2), {"load": "async"}, small) == (32, "async", 2)
    monkeypatch.setattr(igm, "LDMATRIX", False)
    refused = igm.supports(EMULATED[0], {"math": "tf32", "slice": 64}, rt, emulate=True)
    assert not refused.ok and "slice 64" in refused.reason


def test_split_k_and_stages_shape_the_launches(rt):
    p = EMULATED[0]
    _, _, _, _, kernel = _run(p, {"math": "tf32", "mma": (32, 64, 1, 2), "split": 3}, rt,
                              emulate=True)
    assert [s.name for s in kernel.steps] == ["implicit_gemm_tf32", "splitk_reduce"]
    assert kernel.workspace_bytes == 3 * p.n * p.out_h * p.out_w * p.k * 4
    assert algorithms.workspace_bytes("implicit_gemm", p, {"math": "tf32", "split": 3},
                                      "opencl") == kernel.workspace_bytes


def test_mma_constraint_names_the_bad_parameter():
    p = F32_FAST
    reason = algorithms.supports("implicit_gemm", p, RULES, {"math": "tf32",
                                                             "mma": (48, 64, 2, 2)}).reason
    assert "16*WARPS_M" in reason
    reason = algorithms.supports("implicit_gemm", p, RULES, {"math": "f16"}).reason
    assert "F16" in reason
    reason = algorithms.supports("implicit_gemm", p, RULES, {"math": "tf32",
                                                             "tile": (32, 32, 8, 4, 4)}).reason
    assert "tile" in reason
    reason = algorithms.supports("implicit_gemm", p, RULES, {"math": "tf32",
                                                             "mma": (256, 256, 4, 4),
                                                             "slice": 32, "stages": 4}).reason
    assert "local memory" in reason
    reason = algorithms.supports("implicit_gemm", p, RULES, {"math": "tf32", "load": "registers",
                                                             "stages": 3}).reason
    assert "stages must be 1..2" in reason
    assert "slice must be" in algorithms.supports("implicit_gemm", p, RULES,
                                                  {"math": "tf32", "slice": 8}).reason
    assert not algorithms.supports("implicit_gemm", p, RULES, {"mma": (64, 64, 2, 2)}).ok


# -- on tensor cores ----------------------------------------------------------------------------
def _resnet50() -> list[Layer]:
    layers, _ = load_layers(None, ["resnet50"])
    return distinct(layers)


def _native_case(p: ConvProblem, runtime, seed: int = 0, bias: bool = True,
                 variants: list[dict] | None = None) -> int:
    """Every declared variant of ``p`` (or those named) natively, against float64 on the
    exact inputs; the number checked. Prints one line per variant (the device log)."""
    x, w, b = _data(p, seed, bias)
    ref = conv2d_reference(p, x, w, b)
    scale = _scale(p, x, w, b)
    if variants is None:
        variants = [v for v in algorithms.variants("implicit_gemm", p, RULES) if "math" in v]
    assert variants, p
    for params in variants:
        config = igm.configure(p, params, runtime)
        kernel = igm.prepare(p, w, b if bias else None, params, runtime)
        y = kernel.run(x).astype(np.float64)
        bound = mma.error_bound(params["math"], p.dtype, p.kh * p.kw * p.c,
                                config.partial_sums)
        _check_native(p, f"{algorithms.label_of('implicit_gemm', params):<44} split "
                         f"{config.splits:>2}", y, ref, scale, bound)
    return len(variants)


def _check_native(p: ConvProblem, label: str, y: np.ndarray, ref: np.ndarray,
                  scale: np.ndarray, bound: float) -> None:
    """One line of the device log (``label``: the variant), then the checks: every output
    written and finite, and within ``bound`` of its ``scale``."""
    finite = bool(np.isfinite(y).all())
    err = float(np.max(np.abs(y - ref) / scale)) if finite else math.inf
    norm = float(np.linalg.norm(y - ref) / np.linalg.norm(ref)) if finite else math.inf
    print(f"{str(p)[:72]:<72} {label}  max err/scale {err:.2e}  bound {bound:.2e}  "
          f"rel-l2 {norm:.1e}  {'ok' if err <= bound else 'FAIL'}")
    assert finite, f"{p} {label}: unwritten or non-finite outputs"
    assert err <= bound, f"{p} {label}: {err:.3e} > bound {bound:.3e}"


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_every_variant_on_every_resnet50_layer_on_tensor_cores(dtype):
    runtime = tensor_core_runtime()
    checked = 0
    for layer in _resnet50():
        p = layer.problem.replace(n=2, dtype=dtype, fast_math=dtype == "F32")
        checked += _native_case(p, runtime, bias=False)
    assert checked >= 23 * 3


def _random_problems(count: int, dtype: str, seed: int) -> list[ConvProblem]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        kh, kw = (int(v) for v in rng.choice([1, 3, 5, 7], 2))
        sy, sx = (int(v) for v in rng.integers(1, 3, 2))
        p = ConvProblem(int(rng.integers(1, 4)), int(rng.integers(kh, 40)),
                        int(rng.integers(kw, 40)), int(rng.integers(1, 200)),
                        int(rng.integers(1, 300)), kh, kw, stride=(sy, sx),
                        pad=(int(rng.integers(0, kh)), int(rng.integers(0, kh)),
                             int(rng.integers(0, kw)), int(rng.integers(0, kw))),
                        dtype=dtype, fast_math=True,
                        activation=["relu", None][int(rng.integers(0, 2))])
        out.append(p)
    return out


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_every_variant_on_random_shapes_on_tensor_cores(dtype):
    runtime = tensor_core_runtime()
    checked = sum(_native_case(p, runtime, seed=i)
                  for i, p in enumerate(_random_problems(8, dtype, 27)))
    assert checked >= 8


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_tap_masks_on_tensor_cores(dtype, monkeypatch):
    """TAP_MASK natively: every variant on ResNet-50's padded 3x3 layers of several slices per
    tap (stride 1 and 2) and on random shapes, within the bound."""
    runtime = tensor_core_runtime()
    monkeypatch.setattr(igm, "TAP_MASK", True)
    names = ("layer1.{0,1,2}.conv2", "layer3.0.conv2", "layer4.{1,2}.conv2")
    layers = [x for x in _resnet50() if x.name.startswith(names)]
    checked = sum(_native_case(x.problem.replace(n=2, dtype=dtype, fast_math=dtype == "F32"),
                               runtime, bias=False) for x in layers)
    checked += sum(_native_case(p, runtime, seed=i)
                   for i, p in enumerate(_random_problems(3, dtype, 71)))
    assert len(layers) == 3 and checked >= 12


@pytest.mark.parametrize("dtype", ["F32", "F16"])
@pytest.mark.parametrize("pad", [0, 4, 8])
def test_padded_stem_on_tensor_cores(dtype, pad, monkeypatch):
    """PAD_STEM natively (v8): ResNet-50's stem and SqueezeNet's 3x3/2 stem of 3 channels,
    a dilated one and one of 6 channels, every declared variant and cp.async (named) where
    padded, and the launch order grouped along M on a layer of several block columns, within
    the bound."""
    runtime = tensor_core_runtime()
    monkeypatch.setattr(igm, "PAD_STEM", pad)
    stems = [ConvProblem(2, 224, 224, 3, 64, 7, 7, stride=2, pad=3),
             ConvProblem(2, 224, 224, 3, 64, 3, 3, stride=2),
             ConvProblem(1, 31, 29, 3, 24, 3, 5, pad=(2, 1, 0, 3), dilation=(2, 1))]
    stems.append(stems[2].replace(c=6))      # F16: padded to 8; TF32: not padded
    checked = 0
    for i, q in enumerate(stems):
        q = q.replace(dtype=dtype, fast_math=dtype == "F32")
        checked += _native_case(q, runtime, seed=i)
        # and staged by cp.async (named: not offered), where the stem is padded
        if igm.configure(q, {"math": _math(q)}, runtime).channels != q.c:
            named = {"math": _math(q), "mma": (128, 64, 2, 2), "load": "async"}
            checked += _native_case(q, runtime, seed=i, variants=[named])
    if pad == 8:
        monkeypatch.setattr(igm, "GROUP_M", 8)
        wide = ConvProblem(2, 56, 56, 64, 256, 1, 1, dtype=dtype, fast_math=dtype == "F32")
        checked += _native_case(wide, runtime, bias=False)
    assert checked >= 6


# -- Winograd's batched GEMM on tensor cores -----------------------------------------------------
WINOGRAD_EMULATED = [   # ragged tiles, a batch, bias and ReLU; C of whole 16-byte units or not
    ConvProblem(2, 9, 7, 16, 24, 3, 3, pad=1, activation="relu", fast_math=True),
    ConvProblem(1, 10, 13, 6, 10, 3, 3, fast_math=True),
    ConvProblem(1, 8, 9, 8, 12, 5, 5, pad=2, fast_math=True),
    # few tiles and a long reduction: one GEMM alone would take the device's split-K
    ConvProblem(1, 4, 4, 512, 16, 3, 3, pad=1, fast_math=True),
]


def _small_integers(p: ConvProblem, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.integers(-3, 4, p.input_shape).astype(np.float32),
            rng.integers(-3, 4, p.weights_shape).astype(np.float32),
            rng.integers(-3, 4, p.k).astype(np.float32))


def _winograd_mma(p: ConvProblem) -> list[dict]:
    return [v for v in algorithms.variants("winograd", p, RULES) if "math" in v]


@pytest.mark.parametrize("p", WINOGRAD_EMULATED[:2], ids=str)
def test_winograd_on_tensor_cores_emulated_is_exact_on_small_integers(rt, monkeypatch, p):
    """F(2x2, 3x3)'s transforms hold only 0, +-1 and +-1/2, so with small integers every
    transformed value, TF32 rounding, product and sum is exact: any wrong index, batch
    offset or layout of the batched GEMM shows as a difference from float64."""
    monkeypatch.setattr(igm, "EMULATE_WITHOUT_TENSOR_CORES", True)
    x, w, b = _small_integers(p, 3)
    ref = conv2d_reference(p, x, w, b)
    named = [{"tile": (2, 2), "math": "tf32", "mma": (32, 32, 1, 1)},
             {"tile": (2, 2), "math": "tf32", "mma": (64, 64, 2, 2), "load": "async"}]
    offered = [v for v in _winograd_mma(p) if tuple(v["tile"]) == (2, 2)]
    assert offered
    for params in named + offered:
        if params.get("load") == "async" and p.c % 4:
            verdict = wg.supports(p, params, rt)
            assert not verdict.ok and "async" in verdict.reason
            continue
        kernel = wg.prepare(p, w, b, params, rt)
        assert algorithms.workspace_bytes("winograd", p, params, "opencl") \
            >= kernel.workspace_bytes
        y = kernel.run(x)
        assert np.array_equal(y.astype(np.float64), ref), (params, np.abs(y - ref).max())


@pytest.mark.parametrize("p", WINOGRAD_EMULATED, ids=str)
def test_winograd_on_tensor_cores_emulated_within_its_bound(rt, monkeypatch, p):
    """Random data, every tile paired with the kernel, against float64 within
    mma.winograd_error_bound of each output's transformed magnitudes."""
    monkeypatch.setattr(igm, "EMULATE_WITHOUT_TENSOR_CORES", True)
    checked = _winograd_native_case(p, rt, seed=5,
                                    variants=[{"tile": t, "math": "tf32",
                                               "mma": (32, 32, 1, 1)}
                                              for t in winograd_tiles(p, RULES)])
    assert checked >= 1


def _winograd_native_case(p: ConvProblem, runtime, seed: int = 0,
                          variants: list[dict] | None = None) -> int:
    """Every Winograd tensor-core variant of ``p`` (or those named) against float64 on the
    exact inputs, within :func:`mma.winograd_error_bound`; the number checked. One line per
    variant (the device log)."""
    x, w, b = _data(p, seed)
    ref = conv2d_reference(p, x, w, b)
    variants = _winograd_mma(p) if variants is None else variants
    assert variants, p
    scales: dict[tuple[int, ...], np.ndarray] = {}
    for params in variants:
        tile = tuple(int(v) for v in params["tile"])
        if tile not in scales:
            scales[tile] = mma.winograd_scale(
                p, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                np.abs(b.astype(np.float64)), tile, lambda q, a, f: conv2d_reference(q, a, f))
        scale = scales[tile]
        y = wg.prepare(p, w, b, params, runtime).run(x).astype(np.float64)
        bound = mma.winograd_error_bound(tile, (p.kh, p.kw), p.c)
        _check_native(p, f"{algorithms.label_of('winograd', params):<56}", y, ref, scale, bound)
    return len(variants)


def test_winograd_on_tensor_cores_only_under_fast_math_and_only_tf32(rt):
    exact = ConvProblem(1, 8, 8, 16, 16, 3, 3, pad=1)
    params = {"tile": (2, 2), "math": "tf32"}
    assert not [v for v in algorithms.variants("winograd", exact, RULES) if "math" in v]
    assert not [v for v in algorithms.variants("winograd", exact.replace(dtype="F16",
                                                                        fast_math=True),
                                               RULES) if "math" in v]
    for verdict in (algorithms.supports("winograd", exact, RULES, params),
                    wg.supports(exact, params, rt)):
        assert not verdict.ok and "fast_math" in verdict.reason
    with pytest.raises(UnsupportedError, match="fast_math"):
        api.prepare(exact, np.ones(exact.weights_shape, np.float32), algorithm="winograd",
                    params=params, backend="opencl")
    fast = exact.replace(fast_math=True)
    for bad, why in (({**params, "math": "f16"}, "math must be 'tf32'"),
                     ({**params, "split": 2}, "without split-K"),
                     ({**params, "mma": (48, 64, 2, 2)}, "mma")):
        verdict = algorithms.supports("winograd", fast, RULES, bad)
        assert not verdict.ok and why in verdict.reason, (bad, verdict.reason)
    refused = winograd_numpy.supports(fast, params)
    assert not refused.ok and "tensor cores" in refused.reason
    if not mma.tensor_cores(rt).ok:
        verdict = wg.supports(fast, params, rt)
        assert not verdict.ok and "no tensor cores" in verdict.reason
        # neither opencl here nor numpy's fallback runs it: one error naming both, no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            with pytest.raises(UnsupportedError, match="no tensor cores.*nor can the numpy"):
                api.prepare(fast, np.ones(fast.weights_shape, np.float32),
                            algorithm="winograd", params=params, backend="opencl")


def test_every_winograd_variant_on_resnet50_3x3_layers_on_tensor_cores():
    runtime = tensor_core_runtime()
    layers = [x for x in _resnet50() if x.problem.kh == 3 and x.problem.stride == (1, 1)]
    checked = sum(_winograd_native_case(x.problem.replace(n=2, fast_math=True), runtime)
                  for x in layers)
    checked += sum(_winograd_native_case(p, runtime, seed=i)
                   for i, p in enumerate(WINOGRAD_EMULATED))
    assert len(layers) == 4 and checked >= 12


def test_the_probe_passes_on_an_nvidia_gpu_of_capability_8():
    runtime = opencl_runtime()
    capable = mma.device_capability(runtime.device)
    if not capable.ok:
        pytest.skip(capable.reason)
    assert mma.tensor_cores(runtime).ok, mma.tensor_cores(runtime).reason
