"""The OpenCL runtime: program cache, device choice, build errors, limits, failed launches."""

from __future__ import annotations

import json
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from opencl_support import assert_matches_reference, data, opencl_runtime

from convsel.errors import InvalidProblemError, KernelBuildError, UnsupportedError
from convsel.problem import ConvProblem

pyopencl = pytest.importorskip("pyopencl")

from convsel.backends import opencl
from convsel.backends.opencl import cache, direct, tuner
from convsel.backends.opencl import runtime as rtmod

pytestmark = pytest.mark.opencl


@pytest.fixture()
def rt():
    return opencl_runtime()


# -- the runtime cache (no device needed) ------------------------------------------------
def test_cache_counts_hits_and_misses_and_builds_once():
    c = cache.RuntimeCache(capacity=4)
    built = []
    for _ in range(3):
        assert c.get_or_create("a", lambda: built.append("a") or "A") == "A"
    assert built == ["a"]
    assert c.stats().to_dict() == {"capacity": 4, "size": 1, "hits": 2, "misses": 1,
                                   "evictions": 0}


def test_cache_evicts_the_least_recently_used():
    c = cache.RuntimeCache(capacity=2)
    c.get_or_create("a", lambda: 1)
    c.get_or_create("b", lambda: 2)
    c.get_or_create("a", lambda: 1)          # a is now the most recent
    c.get_or_create("c", lambda: 3)          # evicts b
    assert "a" in c and "c" in c and "b" not in c
    assert c.evictions == 1
    c.capacity = 1                           # shrinking evicts at once
    assert len(c) == 1 and "c" in c and c.evictions == 2


def test_cache_does_not_keep_a_failed_build():
    c = cache.RuntimeCache(capacity=2)

    def broken():
        raise KernelBuildError("no", log="error: x")

    for _ in range(2):
        with pytest.raises(KernelBuildError):
            c.get_or_create("k", broken)
    assert "k" not in c and c.misses == 2


@pytest.mark.parametrize("bad", [0, -3, "many"])
def test_cache_capacity_must_be_positive(monkeypatch, bad):
    monkeypatch.setenv(cache.CAPACITY_ENV, str(bad))
    with pytest.raises(InvalidProblemError, match=cache.CAPACITY_ENV):
        cache.capacity_from_env()


def test_cache_capacity_from_environment(monkeypatch):
    monkeypatch.setenv(cache.CAPACITY_ENV, "7")
    assert cache.capacity_from_env() == 7
    monkeypatch.delenv(cache.CAPACITY_ENV)
    assert cache.capacity_from_env() == cache.DEFAULT_CAPACITY


def test_program_key_covers_device_driver_source_and_options():
    ident = {"vendor": "V", "name": "D", "driver": "1.0", "platform": "OpenCL 3.0"}
    base = cache.program_key(ident, "src", ("-DA=1",))
    assert base == cache.program_key(dict(ident), "src", ("-DA=1",))
    assert base != cache.program_key({**ident, "driver": "1.1"}, "src", ("-DA=1",))
    assert base != cache.program_key({**ident, "name": "E"}, "src", ("-DA=1",))
    assert base != cache.program_key(ident, "src ", ("-DA=1",))
    assert base != cache.program_key(ident, "src", ("-DA=2",))
    assert base != cache.program_key(ident, "src", ("-DA=1", "-DB"))


# -- programs on the device ----------------------------------------------------------------
SOURCE = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= FACTOR; }"


def test_runtime_builds_each_program_once(rt):
    before = rt.cache.stats()
    first = rt.program(SOURCE, ("-DFACTOR=2.0f",))
    again = rt.program(SOURCE, ("-DFACTOR=2.0f",))
    other = rt.program(SOURCE, ("-DFACTOR=3.0f",))
    after = rt.cache.stats()
    assert first is again and other is not first
    assert after.hits - before.hits >= 1
    assert after.misses - before.misses <= 2


def test_build_error_carries_the_log(rt):
    with pytest.raises(KernelBuildError) as info:
        rt.program("__kernel void broken(__global float* a) { a[0] = undefined_name; }", ())
    assert "undefined_name" in info.value.log
    assert "build log" in str(info.value)


# -- device choice -----------------------------------------------------------------------
def test_device_specs_in_every_form(rt):
    first = rtmod.all_devices()[0]
    assert rtmod.parse_device_spec(first) == first
    assert rtmod.parse_device_spec(0) == first
    assert rtmod.parse_device_spec("0:0") == first
    assert rtmod.parse_device_spec("0") == first
    assert rtmod.parse_device_spec(first.name[:6].lower()) == first
    with pytest.raises(InvalidProblemError, match="out of range"):
        rtmod.parse_device_spec("0:99")
    with pytest.raises(InvalidProblemError, match="no device name contains"):
        rtmod.parse_device_spec("0:no-such-device")


def test_device_choice_order(rt, monkeypatch):
    monkeypatch.setenv(rtmod.DEVICE_ENV, "0:0")
    monkeypatch.setenv(rtmod.STANDARD_ENV, "0:99")
    assert rtmod.choose_device() == rtmod.all_devices()[0]      # convsel's setting first
    monkeypatch.delenv(rtmod.DEVICE_ENV)
    with pytest.raises(InvalidProblemError, match="0:99"):      # then PYOPENCL_CTX
        rtmod.choose_device()
    assert rtmod.choose_device(0) == rtmod.all_devices()[0]     # the argument beats both


def _fake(name, kind):
    return SimpleNamespace(name=name, type=kind)


def test_default_device_is_the_first_gpu_else_the_first(monkeypatch):
    cpu, gpu = pyopencl.device_type.CPU, pyopencl.device_type.GPU
    monkeypatch.delenv(rtmod.DEVICE_ENV, raising=False)
    monkeypatch.delenv(rtmod.STANDARD_ENV, raising=False)
    monkeypatch.setattr(rtmod, "all_devices",
                        lambda: [_fake("c0", cpu), _fake("g0", gpu), _fake("g1", gpu)])
    assert rtmod.choose_device().name == "g0"
    monkeypatch.setattr(rtmod, "all_devices", lambda: [_fake("c0", cpu), _fake("c1", cpu)])
    assert rtmod.choose_device().name == "c0"


# -- availability and description ----------------------------------------------------------
def test_available_never_raises_without_pyopencl(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyopencl", None)     # import pyopencl -> ImportError
    verdict = opencl.available()
    assert not verdict.ok and "pyopencl" in verdict.reason


def test_available_without_a_device(monkeypatch):
    monkeypatch.setattr(rtmod, "all_devices", list)
    verdict = opencl.available()
    assert not verdict.ok and "no OpenCL device" in verdict.reason
    assert opencl.describe()["available"] is False


def test_describe_is_json_with_devices_limits_and_counters(rt):
    info = json.loads(json.dumps(opencl.describe()))
    assert info["available"] is True
    device = info["platforms"][0]["devices"][0]
    for key in ("name", "type", "max_alloc_bytes", "max_work_group_size", "fp16", "driver"):
        assert key in device
    assert set(info["cache"]) == {"capacity", "size", "hits", "misses", "evictions"}
    assert info["tuner"]["mode"] in (None, *tuner.MODES)
    ident = opencl.device_identity(rt)
    assert ident["backend"] == "opencl" and ident["name"] and ident["driver"]


# -- limits and failures -------------------------------------------------------------------
P = ConvProblem(2, 6, 7, 5, 6, 3, 3, pad=(1, 0, 1, 2), activation="relu")


def test_too_large_buffer_is_refused_before_any_launch(rt, monkeypatch):
    _x, w, b = data(P)
    monkeypatch.setattr(rt, "max_alloc", 256)
    monkeypatch.setattr(rt, "enqueue", lambda *a: pytest.fail("launched"))
    monkeypatch.setattr(rt, "buffer", lambda *a: pytest.fail("allocated"))
    assert not direct.supports(P, {}, rt).ok
    with pytest.raises(UnsupportedError, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE of 256"):
        direct.prepare(P, w, b, {}, rt)


def test_element_counts_beyond_32_bit_indexing_are_refused(rt):
    why = rt.check_buffers({"x": 8}, {"x": 2**31})
    assert why and "32-bit" in why


def test_a_failed_launch_leaves_the_backend_usable(rt, monkeypatch):
    x, w, b = data(P)
    kernel = direct.prepare(P, w, b, {}, rt)
    step = kernel.steps[0]
    bad = tuner.CLTuner()                     # apply-only, with one impossible local size
    bad.table[bad.key(rt, step.config_id)] = (64, 64, 64)
    monkeypatch.setattr(tuner, "_DEFAULT", bad)   # the runtime follows it
    recoveries = rt.recoveries
    with pytest.raises(rtmod.KernelLaunchError, match="queue was reset"):
        kernel.run(x)
    assert rt.recoveries == recoveries + 1
    bad.table.clear()
    assert_matches_reference(P, x, w, b, kernel.run(x), "direct")          # same kernel
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = direct.prepare(P, w, b, {}, rt)                            # a new one
    assert_matches_reference(P, x, w, b, again.run(x), "direct")


def test_run_checks_the_input_shape(rt):
    _x, w, b = data(P)
    kernel = direct.prepare(P, w, b, {}, rt)
    with pytest.raises(InvalidProblemError, match="NHWC shape"):
        kernel.run(np.zeros((1, 2, 3, 4), np.float32))


def test_a_kernel_missing_from_its_program_is_a_build_error(rt):
    from convsel.backends.opencl.launch import bind

    program = rt.program(SOURCE, ("-DFACTOR=2.0f",))
    with pytest.raises(KernelBuildError, match="no_such_kernel cannot be created"):
        bind(program, "no_such_kernel", [])


def test_an_allocation_the_driver_refuses_is_unsupported(rt, monkeypatch):
    # Drivers differ on when they refuse (PoCL at once, NVIDIA lazily): simulate the refusal.
    def refuse(*args, **kwargs):
        raise pyopencl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(rtmod.cl, "Buffer", refuse)
    with pytest.raises(UnsupportedError, match="cannot allocate 4096 bytes"):
        rt.buffer(4096)


def test_describe_reports_a_bad_setting_instead_of_raising(rt, monkeypatch):
    monkeypatch.setenv(rtmod.DEVICE_ENV, "0:99")
    monkeypatch.setenv(tuner.MODE_ENV, "sometimes")
    monkeypatch.setattr(tuner, "_DEFAULT", None)
    info = opencl.describe()
    assert info["default_device"] is None and "0:99" in info["device_error"]
    assert tuner.MODE_ENV in info["tuner"]["error"]
