"""Backends in order of preference (ArmNN's backendPreferences) and the fastest backend per
layer: prepare/conv2d/find/choose over a list, on numpy and the real (PoCL) OpenCL driver."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from opencl_support import data, opencl_runtime
from tolerances import assert_within_tolerance

import convsel
from convsel import ConvProblem, FallbackWarning, InvalidProblemError, UnsupportedError, arguments
from convsel.backends import Placement, Preference, transfer
from convsel.backends.transfer import TransferCost
from convsel.policies import get_policy
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import decide
from convsel.tuning.timing import TimingSettings

P = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1)
A = ConvProblem(1, 16, 16, 32, 32, 3, 3, pad=1)      # ACL (cpu): winograd 4x4
B = ConvProblem(1, 8, 8, 32, 16, 1, 1)               # ACL (cpu): gemm_1x1
FFT_ON_GPU = ConvProblem(1, 16, 16, 16, 8, 7, 7, pad=3, layout="NCHW")   # ACL (G77): fft
NO_FFT = "not supported by backend opencl: the opencl backend has no fft implementation"


@pytest.fixture(autouse=True)
def _opencl():
    opencl_runtime()    # PoCL here; skips where a machine has no OpenCL device


# -- reading the argument ----------------------------------------------------------------------
@pytest.mark.parametrize("value, entries", [
    ("numpy", [Placement("numpy")]),
    ("opencl:0", [Placement("opencl", 0)]),
    ("opencl, numpy", [Placement("opencl"), Placement("numpy")]),
    (["opencl:0", "numpy"], [Placement("opencl", 0), Placement("numpy")]),
])
def test_the_forms_of_a_backend_argument(value, entries):
    assert list(arguments.backends(value)) == entries


def test_auto_is_every_backend_available_here_in_registry_order():
    from convsel.backends import BACKENDS, available

    chosen = arguments.backends("auto")
    here = [name for name in BACKENDS if available(name).ok]
    assert chosen.auto and [str(e) for e in chosen] == here
    assert here[:2] == ["numpy", "opencl"]   # the suite runs where both are (PoCL)


@pytest.mark.parametrize("value, words", [
    (["opencl", "cuda"], "unknown backend; known: numpy, opencl"),
    ("opencl,cuda", "unknown backend; known: numpy, opencl"),
    ("opencl:gpu", "the device after ':' is an index"),
    ("numpy,numpy", "names a backend twice"),
    ([], "unknown backend"),
])
def test_a_bad_backend_argument_is_a_clear_error(value, words):
    with pytest.raises(InvalidProblemError, match=words) as info:
        arguments.backends(value)
    assert info.value.field == "backend" and info.value.value == value


def _model() -> bytes:
    pytest.importorskip("onnx")
    from onnx_models import Chain

    return Chain((1, 4, 8, 8)).conv(4, 3, name="conv", pads=[1] * 4).model().SerializeToString()


@pytest.mark.parametrize("entry", ["prepare", "conv2d", "find", "choose", "plan"])
def test_an_unknown_name_in_a_list_names_the_known_ones_at_every_entry_point(entry):
    bad = ["opencl", "cuda"]
    calls = {
        "prepare": lambda: convsel.prepare(P, np.zeros(P.weights_shape, np.float32),
                                           backend=bad),
        "conv2d": lambda: convsel.conv2d(np.zeros(P.input_shape, np.float32),
                                         np.zeros(P.weights_shape, np.float32), pad=1,
                                         backend=bad),
        "find": lambda: convsel.find(P, backend=bad),
        "choose": lambda: convsel.choose(P, policy="measured", backend=bad),
        "plan": lambda: convsel.plan(_model(), backend=bad),
    }
    with pytest.raises(InvalidProblemError) as info:
        calls[entry]()
    assert (info.value.field, info.value.value) == ("backend", bad)
    assert info.value.rule.startswith("unknown backend; known: numpy, opencl")


def test_a_device_named_twice_is_refused():
    with pytest.raises(InvalidProblemError, match="names the device already") as info:
        convsel.prepare(P, np.zeros(P.weights_shape, np.float32), backend="opencl:0", device=0)
    assert info.value.field == "device"


def test_one_backend_where_a_list_has_no_meaning():
    with pytest.raises(InvalidProblemError, match="one backend name here"):
        convsel.select(P, backend="opencl,numpy", max_workspace_bytes=1 << 20)


# -- the first backend that supports it runs it ----------------------------------------------
def test_a_list_whose_first_backend_cannot_run_it_runs_the_next_and_says_why():
    x, w, b = data(P)
    with pytest.warns(FallbackWarning, match=NO_FFT):
        op = convsel.prepare(P, w, b, algorithm="fft", backend=["opencl", "numpy"])
    assert (op.backend, op.algorithm) == ("numpy", "fft")
    assert op.passed_over == (NO_FFT,)
    assert op.fallback == f"{NO_FFT}; ran fft on numpy"
    assert_within_tolerance(P, x, w, b, op.run(x), "fft")


def test_the_rules_answer_goes_to_the_first_backend_that_supports_it():
    """G77's rules pick FFT for a 7x7 layer with more inputs than outputs: OpenCL has none."""
    x, w, b = data(FFT_ON_GPU)
    with pytest.warns(FallbackWarning, match=NO_FFT):
        y = convsel.conv2d(x, w, b, pad=3, layout="NCHW", target="G77",
                           backend="opencl,numpy")
    op = convsel.prepare(FFT_ON_GPU, w, b, target="G77", backend="numpy")
    np.testing.assert_array_equal(y, op.run(x))         # the same algorithm, on numpy


def test_a_list_runs_on_its_first_backend_when_that_one_can():
    x, w, b = data(P)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        op = convsel.prepare(P, w, b, backend=["opencl", "numpy"])
    assert op.backend == "opencl" and op.passed_over == () and op.fallback is None
    assert_within_tolerance(P, x, w, b, op.run(x), op.algorithm)


def test_a_single_name_still_falls_back_to_numpy():
    _, w, b = data(P)
    with pytest.warns(FallbackWarning, match="ran numpy instead"):
        op = convsel.prepare(P, w, b, algorithm="fft", backend="opencl")
    assert op.backend == "numpy" and "no fft implementation" in op.fallback


def test_no_backend_of_the_list_runs_it():
    _, w, b = data(P)
    with pytest.raises(UnsupportedError) as info:
        convsel.prepare(P, w, b, algorithm="fft", backend=["opencl", "opencl:0"])
    assert "no backend of opencl, opencl:0 runs fft" in str(info.value)
    assert str(info.value).count("no fft implementation") == 2


# -- the fastest backend per layer -------------------------------------------------------------
def _t(alg: str, ms: float, clock: str, **params) -> dict:
    return {"algorithm": alg, "params": params, "median_s": ms / 1e3, "iqr_s": ms / 1e5,
            "runs": 7, "min_s": ms / 1e3, "pruned": False, "clock": clock}


def _record(db: TuningDB, p: ConvProblem, backend: str, timings: dict) -> None:
    from convsel.tuning.identity import device_identity

    winner, tie = decide(timings)
    db.record(TuningEntry(problem=p, backend=backend, device=device_identity(backend),
                          winner=winner, tie=tie, timings=timings))


# A PoCL link of 50 µs and 10 GB/s a copy, instead of the probe's figure: the probe times real
# copies, which a loaded host can slow past these tests' margins (its own test is below).
STEADY_LINK = TransferCost(5e-5, 1e10, "given by the test")


@pytest.fixture
def planted(tmp_path, monkeypatch) -> TuningDB:
    """A: OpenCL's direct is 6x numpy's best; B: numpy's 1x1 GEMM is 10x OpenCL's."""
    monkeypatch.setattr(transfer, "_MEASURED", {})
    monkeypatch.setattr(transfer, "_probe_opencl", lambda runtime: STEADY_LINK)
    db = TuningDB(tmp_path / "tuning.sqlite")
    _record(db, A, "numpy", {"direct": _t("direct", 5.0, "wall"),
                             "winograd:4x4": _t("winograd", 3.0, "wall", tile=[4, 4])})
    _record(db, A, "opencl", {"direct": _t("direct", 0.5, "device"),
                              "implicit_gemm": _t("implicit_gemm", 0.8, "device")})
    _record(db, B, "numpy", {"gemm_1x1": _t("gemm_1x1", 0.05, "wall")})
    _record(db, B, "opencl", {"gemm_1x1": _t("gemm_1x1", 0.5, "device")})
    return db


@pytest.mark.parametrize("p, backend, algorithm, label", [
    (A, "opencl", "direct", "opencl direct 0.5 ms"),
    (B, "numpy", "gemm_1x1", "numpy gemm_1x1 0.05 ms"),
])
def test_measured_over_two_backends_picks_the_faster_pair_per_layer(planted, p, backend,
                                                                    algorithm, label):
    sel = convsel.choose(p, policy="measured", backend=["numpy", "opencl"], db=planted.path)
    assert (sel.backend, sel.algorithm, sel.source) == (backend, algorithm, "tuning-db")
    assert sel.rule == "across.fastest" and label in sel.reason
    assert sel.reason.endswith(f"-> {backend}")
    assert f"on {backend}" in sel.explain() and sel.to_dict()["backend"] == backend
    compared = {e["backend"]: e for e in sel.measurement["backends"]}
    assert set(compared) == {"numpy", "opencl"}
    assert compared["numpy"]["copies_ms"] == 0 and compared["opencl"]["copies_ms"] > 0


def test_the_copies_to_and_from_the_device_are_counted(planted):
    """Give the link a 1 ms latency: OpenCL's 0.5 ms kernel then costs 2.5 ms from the host,
    and numpy's 3 ms Winograd is still slower; at 2 ms a copy, numpy wins."""
    policy = get_policy("measured", backend=["numpy", "opencl"], db=planted.path)
    for latency, expected in [(1e-3, "opencl"), (2e-3, "numpy")]:
        slow = dataclasses.replace(policy, transfers=(("opencl", TransferCost(
            latency, 1e12, "given by the test")),))
        assert convsel.choose(A, policy=slow).backend == expected


def test_a_backend_without_timings_is_not_compared_and_the_trace_says_so(tmp_path):
    db = TuningDB(tmp_path / "tuning.sqlite")
    _record(db, A, "numpy", {"winograd:4x4": _t("winograd", 3.0, "wall", tile=[4, 4])})
    sel = convsel.choose(A, policy="measured", backend="opencl,numpy", db=db.path)
    assert (sel.backend, sel.algorithm) == ("numpy", "winograd")
    assert [s.id for s in sel.trace[-2:]] == ["across.not-compared", "across.fastest"]
    assert sel.trace[-2].reason.startswith("opencl: no timing or model to compare")


def test_without_any_timing_the_rules_answer_runs_on_the_first_that_supports_it(tmp_path):
    sel = convsel.choose(FFT_ON_GPU, "G77", policy="measured", backend=["opencl", "numpy"],
                         db=tmp_path / "empty.sqlite")
    assert (sel.backend, sel.algorithm, sel.source) == ("numpy", "fft", "rules")
    assert sel.rule == "across.first-supported" and NO_FFT in sel.reason


def test_prepare_runs_where_the_measured_policy_chose(planted):
    x, w, b = data(A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        op = convsel.prepare(A, w, b, policy="measured", backend=["numpy", "opencl"],
                             db=planted.path)
    assert (op.backend, op.algorithm, op.selection.backend) == ("opencl", "direct", "opencl")
    assert_within_tolerance(A, x, w, b, op.run(x), "direct")


def test_find_over_two_backends_ranks_them_together_copies_included():
    fast = TimingSettings(warmup=1, min_runs=3, min_time=0.0, max_runs=4, rounds=1)
    r = convsel.find(P, backend=Preference((Placement("opencl"), Placement("numpy"))),
                     settings=fast)
    ok = [e for e in r.results if e.status == "ok"]
    assert {e.backend for e in ok} == {"numpy", "opencl"} and set(r.devices) == {"opencl",
                                                                                "numpy"}
    assert all((e.transfer_s or 0) > 0 for e in ok if e.backend == "opencl")
    assert all(e.transfer_s is None for e in ok if e.backend == "numpy")
    assert [e.cost_s for e in ok] == sorted(e.cost_s for e in ok)
    assert [e.rank for e in ok] == list(range(1, len(ok) + 1))
    assert r.winner == ok[0].qualified or ok[0].qualified in r.tie
    fft = next(e for e in r.results if e.backend == "opencl" and e.label == "fft")
    assert fft.status == "unsupported"
    assert "opencl/" in r.table() and r.to_dict()["results"][0]["backend"] in ("numpy",
                                                                               "opencl")


# -- capabilities --------------------------------------------------------------------------------
def test_capabilities_report_each_backend_and_device():
    from convsel.backends import BACKENDS, IMPLEMENTATIONS, capabilities

    report = {b["backend"]: b for b in capabilities()}
    assert list(report) == list(BACKENDS)
    for name, b in report.items():
        assert b["available"] and b["dtypes"] == ["F32", "F16"] and b["devices"]
        assert b["algorithms"] == sorted(a for (a, be) in IMPLEMENTATIONS if be == name)
    assert report["numpy"]["device_resident"] is False and report["opencl"]["device_resident"]
    assert "fft" in report["numpy"]["algorithms"] and "fft" not in report["opencl"]["algorithms"]
    runtime = opencl_runtime()
    first = report["opencl"]["devices"][0]
    assert first["index"] == 0 and first["fp16"] == runtime.fp16
    assert first["f16"].startswith("native" if runtime.fp16 else "half storage")
    assert set(first["tensor_cores"]) == {"ok", "reason"}
    cpu = report["numpy"]["devices"][0]
    assert cpu["gemm"].startswith("GEMM by ") and cpu["fused_kernels"]


def test_backends_cli_lists_the_names_a_backend_list_takes(capsys):
    import json

    from convsel.backends import BACKENDS
    from convsel.cli import main

    assert main(["backends", "--transfers"]) == 0
    out = capsys.readouterr().out
    assert "opencl:0 " in out and "device-resident arrays" in out and "host-device copy" in out
    assert "GEMM by " in out   # which library runs the numpy backend's products
    assert main(["backends", "--json"]) == 0
    assert [b["backend"] for b in json.loads(capsys.readouterr().out)] == list(BACKENDS)


def test_the_copy_cost_is_measured_on_the_device_and_nothing_on_the_host():
    from convsel.backends.transfer import HOST, transfer_cost

    assert transfer_cost("numpy") is HOST and HOST.seconds(1 << 20) == 0
    link = transfer_cost("opencl")
    assert link.latency_s >= 0 and 0 < link.bytes_per_s < math.inf
    assert link.seconds(8 << 20) > link.seconds(4 << 10) > 0
    assert transfer_cost("opencl") is link          # once per device and process


def test_a_backend_whose_workspace_is_over_the_limit_is_passed_over_for_the_next():
    """winograd 4x4 needs less workspace on OpenCL than on numpy: a limit between the two
    passes numpy over, saying so, and runs on OpenCL."""
    big = ConvProblem(1, 56, 56, 64, 64, 3, 3, pad=1)
    on_cl = convsel.algorithms.workspace_bytes("winograd", big, {"tile": (4, 4)}, "opencl")
    on_np = convsel.algorithms.workspace_bytes("winograd", big, {"tile": (4, 4)}, "numpy")
    assert on_cl < on_np
    w = np.zeros(big.weights_shape, np.float32)
    with pytest.warns(FallbackWarning, match="not run by backend numpy: winograd:4x4 on numpy"):
        op = convsel.prepare(big, w, algorithm="winograd", tile=(4, 4),
                             backend=["numpy", "opencl"], max_workspace_bytes=on_cl)
    assert op.backend == "opencl" and "over the limit" in op.passed_over[0]
    with pytest.raises(convsel.WorkspaceLimitError, match="no backend of numpy, opencl"):
        convsel.prepare(big, w, algorithm="winograd", tile=(4, 4),
                        backend=["numpy", "opencl"], max_workspace_bytes=on_cl - 1)


def test_predictions_compare_as_timings_do():
    """The predicted policy's answers carry the model's predicted time of its pick: those are
    compared, a device's copies added, as measured medians are."""
    from convsel.policies.across import choose_across, estimate

    acl = convsel.select(A)

    def predicted(algorithm: str, ms: float) -> convsel.Selection:
        return dataclasses.replace(acl, algorithm=algorithm, params={}, source="model",
                                   measurement={"model": {"id": "m1"}, "ranking": [
                                       {"label": algorithm, "predicted_ms": ms}]})

    link = TransferCost(1e-4, 1e10, "given")
    numpy_says = estimate("numpy", "numpy", predicted("im2col_gemm", 2.0), link)
    opencl_says = estimate("opencl", "opencl", predicted("direct", 0.5), link)
    assert numpy_says.how == "predicted by model m1" and numpy_says.host_call_s(A) == 2e-3
    sel = choose_across(A, [numpy_says, opencl_says], {})
    assert (sel.backend, sel.algorithm, sel.source) == ("opencl", "direct", "model")
    slow = dataclasses.replace(opencl_says, transfer=TransferCost(1e-3, 1e10, "given"))
    assert choose_across(A, [numpy_says, slow], {}).backend == "numpy"


def test_find_over_two_backends_shares_one_time_budget(monkeypatch):
    import convsel.finder as finder

    budgets: list[float] = []
    real = finder.measure

    def recording(*args, budget_s=None, **kwargs):
        budgets.append(budget_s)
        return real(*args, budget_s=budget_s, **kwargs)

    monkeypatch.setattr(finder, "measure", recording)
    fast = TimingSettings(warmup=0, min_runs=1, min_time=0.0, max_runs=1, rounds=1)
    convsel.find(P, backend="numpy,opencl", settings=fast, budget_s=2.0)
    # the first backend gets half; the second what is left of the whole (not 2 s again)
    assert len(budgets) == 2 and budgets[0] == pytest.approx(1.0, abs=0.05)
    assert budgets[1] < 2.0


def test_host_backends_are_the_ones_whose_timings_depend_on_threads():
    from convsel.backends import BACKENDS, on_host

    assert [b for b in BACKENDS if on_host(b)] == ["numpy", "onednn"]
    assert not on_host("opencl")
