"""The opt-in 512-bit vectors (``CONVSEL_WIDE_VECTORS``): off by default, numba untouched;
on, ``-prefer-256-bit`` reaches numba's code generator before anything compiles, the device
key names it, and the correctness suite passes on the kernels compiled that way.

numba's CPU features are fixed per process at its first compile, so every check of a setting
runs in a fresh Python process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from repo import ROOT

from convsel import config
from convsel.errors import InvalidProblemError

numba = pytest.importorskip("numba", reason="the fused kernels need the cpu extra (numba)")

VARIABLE = config.variable("wide_vectors")

# In a fresh process: compile and run one fused kernel, then report what numba was given.
PROBE = """
import json, os
import numpy as np
import numba
from numba.core.registry import cpu_target
from convsel.backends.numpy import accel
from convsel.backends.numpy.fused import activation, epilogue
y = np.ones((130, 64), np.float32)
epilogue.bias_activation(y, np.ones(64, np.float32), activation.code_of(None))
assert float(y[0, 0]) == 2.0
asm = "".join(epilogue._bias_activation.inspect_asm().values())
print(json.dumps({
    "numba_config": numba.config.CPU_FEATURES,
    "environment": os.environ.get("NUMBA_CPU_FEATURES"),
    "codegen": cpu_target.target_context.codegen().magic_tuple()[2],
    "describe": accel.describe(),
    "zmm": asm.count("zmm"), "ymm": asm.count("ymm")}))
"""


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (VARIABLE, "NUMBA_CPU_FEATURES", "NUMBA_CPU_NAME")}
    # a cache of its own: each process compiles afresh (inspect_asm needs the compiled IR)
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
               NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), **extra)
    return env


def _probe(tmp_path: Path, **extra: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE], env=_environment(tmp_path, **extra),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _has_avx512() -> bool:
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512f", False))


needs_avx512 = pytest.mark.skipif(not _has_avx512(),
                                  reason="this CPU has no AVX-512: no 512-bit vectors to allow")


def test_by_default_numbas_features_are_left_alone(tmp_path: Path):
    seen = _probe(tmp_path)
    assert seen["numba_config"] is None and seen["environment"] is None
    assert "-prefer-256-bit" not in str(seen["codegen"]).split(",")
    assert "512-bit" not in str(seen["describe"])


def test_the_setting_reaches_numbas_code_generator(tmp_path: Path):
    seen = _probe(tmp_path, **{VARIABLE: "1"})
    assert str(seen["numba_config"]).split(",")[-1] == "-prefer-256-bit"
    assert "-prefer-256-bit" in str(seen["codegen"]).split(",")
    assert "512-bit vectors" in str(seen["describe"])   # the device key tells the timings apart
    assert seen["environment"] is None   # numba's own variable is never written


@needs_avx512
def test_on_intel_server_tuning_the_setting_turns_ymm_into_zmm(tmp_path: Path):
    """The quiet host's case: LLVM's Intel server tuning (icelake-server to emeraldrapids)
    prefers 256-bit vectors; with the setting the same kernel uses zmm registers."""
    default = _probe(tmp_path / "ymm", NUMBA_CPU_NAME="icelake-server")
    wide = _probe(tmp_path / "zmm", NUMBA_CPU_NAME="icelake-server", **{VARIABLE: "yes"})
    assert default["zmm"] == 0 and int(default["ymm"]) > 0   # type: ignore[call-overload]
    assert int(wide["zmm"]) > 0   # type: ignore[call-overload]


@pytest.mark.parametrize("word", ["0", "off", "no", "false", ""])
def test_off_words_and_empty_mean_off(monkeypatch: pytest.MonkeyPatch, word: str):
    from convsel.backends.numpy.fused import vectors

    monkeypatch.setenv(VARIABLE, word)
    assert vectors.wanted() is False


def test_a_bad_value_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch):
    from convsel.backends.numpy.fused import vectors

    monkeypatch.setenv(VARIABLE, "wide")
    with pytest.raises(InvalidProblemError) as err:
        vectors.wanted()
    assert err.value.field == VARIABLE and err.value.value == "wide"


def test_too_late_in_a_process_it_warns_and_changes_nothing(monkeypatch: pytest.MonkeyPatch):
    from convsel.backends.numpy.fused import vectors

    numba.njit(lambda v: v + 1)(1)   # numba has compiled: its features are fixed
    before = numba.config.CPU_FEATURES
    monkeypatch.setenv(VARIABLE, "1")
    with pytest.warns(RuntimeWarning, match=VARIABLE):
        vectors.apply()
    assert numba.config.CPU_FEATURES == before


def test_in_force_is_what_the_environment_asked(monkeypatch: pytest.MonkeyPatch):
    """Run by the next test in a process started with the setting on (and in this one, off)."""
    from convsel.backends.numpy.fused import vectors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert vectors.in_force() == vectors.wanted()


@pytest.mark.slow
def test_the_fused_correctness_suite_passes_with_wide_vectors(tmp_path: Path):
    """tests/backends/numpy/test_fused_correctness.py (same tolerances) in a process with the
    setting on; where the CPU has AVX-512, compiled for Intel server tuning, so that the
    kernels tested are the zmm ones the setting exists for (a Zen 4 host uses zmm anyway)."""
    extra = {VARIABLE: "1"}
    if _has_avx512():
        extra["NUMBA_CPU_NAME"] = "icelake-server"
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
         str(here / "test_fused_correctness.py"),
         f"{here / Path(__file__).name}::test_in_force_is_what_the_environment_asked"],
        env=_environment(tmp_path, **extra), cwd=ROOT, capture_output=True, text=True,
        timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    assert "skipped" not in done.stdout   # numba is there: every test ran
