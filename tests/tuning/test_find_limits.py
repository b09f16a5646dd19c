"""Workspace limits in select/choose/prepare/conv2d, tuning on first use (tune="auto"), and
the PyTorch-conventions hint of conv2d."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import tolerance

import convsel
from convsel import ConvProblem, algorithms, select
from convsel.errors import InvalidProblemError, UnsupportedError
from convsel.policies import measured as measured_policy
from convsel.reference import conv2d_reference
from convsel.rules import load_rules
from convsel.selection import workspace_order
from convsel.tuning import measure as measure_module
from convsel.tuning.db import TuningDB
from convsel.tuning.timing import TimingSettings

P = ConvProblem(1, 56, 56, 64, 64, 3, 3, pad=1)     # ACL (cpu): winograd 4x4


def _need(alg: str, params, backend=None) -> int:
    return algorithms.workspace_bytes(alg, P, params, backend)


# -- select / choose ---------------------------------------------------------------------------
def test_no_limit_and_a_fitting_limit_keep_acls_choice():
    acl = select(P)
    assert (acl.algorithm, acl.params["tile"]) == ("winograd", (4, 4))
    fits = select(P, max_workspace_bytes=_need("winograd", acl.params))
    assert (fits.algorithm, fits.params, fits.rule) == (acl.algorithm, acl.params, acl.rule)
    assert fits.trace[-1].id == "workspace.fits" and fits.fallback is None


def test_over_the_limit_takes_the_first_that_fits_and_says_what_was_excluded():
    limit = _need("winograd", {"tile": (4, 4)}) - 1
    sel = select(P, max_workspace_bytes=limit)
    assert sel.rule == "workspace.limit" and sel.reason.startswith(
        algorithms.label_of(sel.algorithm, sel.params))
    assert _need(sel.algorithm, sel.params) <= limit
    excluded = [s for s in sel.trace if s.id == "workspace.excluded"]
    assert excluded and excluded[0].reason.startswith("winograd:4x4: needs")
    # the documented order: everything before the answer is over the limit, and named
    order = workspace_order(P, load_rules(), select(P))
    chosen = order.index((sel.algorithm, dict(sel.params)))
    assert chosen == len(excluded)
    for (alg, params), step in zip(order[:chosen], excluded):
        assert _need(alg, params) > limit
        assert step.reason.startswith(algorithms.label_of(alg, params) + ": needs")
    assert "winograd:4x4 needs more workspace" in sel.fallback
    assert sel.method == algorithms.method_for(sel.algorithm, gpu=False)


def test_nothing_fits_is_unsupported_naming_every_candidate():
    with pytest.raises(UnsupportedError, match="max_workspace_bytes=0") as info:
        select(P, max_workspace_bytes=0)
    assert "direct: needs" in str(info.value) and "winograd:4x4: needs" in str(info.value)


@pytest.mark.parametrize("bad", [-1, 1.5, "1MB", True])
def test_a_bad_limit_names_the_field(bad):
    with pytest.raises(InvalidProblemError) as info:
        select(P, max_workspace_bytes=bad)
    assert info.value.field == "max_workspace_bytes"


def test_a_backend_narrows_the_estimate():
    """im2col's OpenCL workspace is the whole matrix; numpy's is banded and may be smaller,
    so a limit between them admits im2col on numpy only."""
    big = ConvProblem(1, 300, 300, 64, 64, 3, 3, pad=1)
    on_numpy = algorithms.workspace_bytes("im2col_gemm", big, {}, "numpy")
    on_opencl = algorithms.workspace_bytes("im2col_gemm", big, {}, "opencl")
    assert on_numpy < on_opencl
    assert algorithms.workspace_bytes("im2col_gemm", big, {}) == on_opencl
    sel = convsel.choose(big, max_workspace_bytes=on_numpy, workspace_backend="numpy")
    assert _ok_on(big, sel, on_numpy, "numpy")


def _ok_on(p, sel, limit, backend) -> bool:
    return algorithms.workspace_bytes(sel.algorithm, p, sel.params, backend) <= limit


def test_measured_policy_under_a_limit_takes_the_fastest_measured_that_fits(tmp_path):
    from convsel.tuning.entry import TuningEntry
    from convsel.tuning.identity import device_identity

    def t(ms, alg, **params):
        return {"algorithm": alg, "params": {k: list(v) for k, v in params.items()},
                "median_s": ms / 1e3, "iqr_s": 0.0, "runs": 8, "min_s": ms / 1e3,
                "pruned": False}

    timings = {"winograd:4x4": t(1.0, "winograd", tile=(4, 4)),
               "winograd:2x2": t(1.5, "winograd", tile=(2, 2)),
               "indirect_gemm": t(2.0, "indirect_gemm"), "im2col_gemm": t(3.0, "im2col_gemm"),
               "direct": t(9.0, "direct")}
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(TuningEntry(P, "numpy", device_identity("numpy"), "winograd:4x4", (), timings))
    limit = _need("indirect_gemm", {}, "numpy")   # fits indirect (2.0 ms), not winograd
    assert _need("winograd", {"tile": (2, 2)}, "numpy") > limit
    sel = convsel.choose(P, policy="measured", db=db, max_workspace_bytes=limit)
    assert sel.algorithm == "indirect_gemm" and sel.rule == "workspace.limit"
    assert sel.source == "tuning-db"


# -- prepare / conv2d --------------------------------------------------------------------------
def _data(p: ConvProblem):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(p.input_shape).astype(np.float32),
            rng.standard_normal(p.weights_shape).astype(np.float32))


def test_prepare_runs_the_best_that_fits_and_its_real_workspace_fits():
    x, w = _data(P)
    limit = 1 << 20
    op = convsel.prepare(P, w, max_workspace_bytes=limit)
    assert op.workspace_bytes <= limit and op.algorithm != "winograd"
    assert op.selection.rule == "workspace.limit"
    y = op.run(x)
    ref = conv2d_reference(P, x, w, None)
    scale = conv2d_reference(P, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             None).max()
    assert np.abs(y - ref).max() / scale <= tolerance(op.algorithm, "F32")


def test_a_named_algorithm_over_the_limit_is_unsupported():
    _, w = _data(P)
    with pytest.raises(UnsupportedError, match="workspace"):
        convsel.prepare(P, w, algorithm="im2col_gemm", max_workspace_bytes=1000)
    op = convsel.prepare(P, w, algorithm="direct", max_workspace_bytes=1 << 20)
    assert op.algorithm == "direct"


def test_conv2d_passes_the_limit_down():
    p = ConvProblem(1, 20, 20, 16, 16, 3, 3, pad=1)
    x, w = _data(p)
    limit = algorithms.workspace_bytes("direct", p, {}, "numpy")
    y = convsel.conv2d(x, w, pad=1, max_workspace_bytes=limit)
    assert np.allclose(y, convsel.conv2d(x, w, pad=1, algorithm="direct"), atol=1e-4)


# -- tune="auto" -------------------------------------------------------------------------------
def test_auto_tune_times_once_then_reuses(tmp_path, monkeypatch):
    p = ConvProblem(1, 8, 8, 8, 8, 3, 3, pad=1)
    _, w = _data(p)
    calls = []
    real = measure_module.measure

    def counting(*args, **kwargs):
        calls.append(kwargs.get("budget_s"))
        kwargs.setdefault("settings", TimingSettings(warmup=0, min_runs=2, min_time=0.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_module, "measure", counting)
    db = tmp_path / "auto.sqlite"
    first = convsel.prepare(p, w, policy="measured", tune="auto", tune_budget_s=30, db=str(db))
    assert calls == [30] and first.selection.source == "tuning-db"
    again = convsel.prepare(p, w, policy="measured", tune="auto", tune_budget_s=30, db=str(db))
    assert calls == [30] and again.algorithm == first.algorithm
    assert TuningDB(db).status()["entries"] == 1


def test_auto_tune_cut_short_is_reused_in_process_but_not_recorded(tmp_path, monkeypatch):
    p = ConvProblem(1, 9, 9, 8, 8, 3, 3, pad=1)
    _, w = _data(p)
    calls = []
    real = measure_module.measure

    def slow(*args, **kwargs):
        calls.append(1)
        kwargs["settings"] = TimingSettings(min_time=5.0, max_runs=10_000)
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_module, "measure", slow)
    monkeypatch.setattr(measured_policy, "_MEMO", {})
    db = tmp_path / "cut.sqlite"
    convsel.prepare(p, w, policy="measured", tune="auto", tune_budget_s=0.05, db=str(db))
    convsel.prepare(p, w, policy="measured", tune="auto", tune_budget_s=0.05, db=str(db))
    assert len(calls) == 1
    assert TuningDB(db).status()["entries"] == 0


def test_tune_needs_the_measured_policy_and_a_valid_setting():
    _, w = _data(P)
    with pytest.raises(InvalidProblemError, match="measured"):
        convsel.prepare(P, w, tune="auto")
    with pytest.raises(InvalidProblemError) as info:
        convsel.prepare(P, w, policy="measured", tune="sometimes")
    assert info.value.field == "tune"
    with pytest.raises(InvalidProblemError) as info:
        convsel.prepare(P, w, policy="measured", tune="auto", tune_budget_s=-1)
    assert info.value.field == "tune_budget_s"


# -- PyTorch conventions -----------------------------------------------------------------------
def test_torch_shaped_arrays_with_default_layouts_get_the_hint():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)     # NCHW
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)       # OIHW
    with pytest.raises(InvalidProblemError, match='layout="NCHW", weights_layout="OIHW"'):
        convsel.conv2d(x, w, pad=1)
    y = convsel.conv2d(x, w, pad=1, layout="NCHW", weights_layout="OIHW")
    nhwc = ConvProblem(2, 16, 16, 3, 8, 3, 3, pad=1)
    ref = conv2d_reference(nhwc, x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1),
                           None).transpose(0, 3, 1, 2)
    assert y.shape == (2, 8, 16, 16) and np.allclose(y, ref, atol=1e-4)


def test_shapes_that_do_not_read_as_torch_get_no_hint():
    x = np.zeros((1, 16, 16, 5), np.float32)
    w = np.zeros((8, 3, 3, 3), np.float32)      # 3 does not divide x.shape[1] = 16 either
    with pytest.raises(InvalidProblemError) as info:
        convsel.conv2d(x, w)
    assert "OIHW" not in str(info.value)
