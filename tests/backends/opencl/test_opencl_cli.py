"""``convsel devices`` and ``convsel tune-cl``."""

from __future__ import annotations

import json

import pytest
from opencl_support import opencl_runtime

from convsel.cli import main

pytest.importorskip("pyopencl")

from convsel.backends.opencl import tuner

pytestmark = pytest.mark.opencl


@pytest.fixture()
def restore_tuner():
    """tune-cl replaces the process-wide tuner: put the previous one back afterwards (the
    runtimes follow the process-wide tuner, so they follow it back)."""
    opencl_runtime()
    previous = tuner.default_tuner()
    yield
    tuner._DEFAULT = previous


def test_devices_lists_limits(capsys):
    rt = opencl_runtime()
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "device 0:0" in out and rt.identity["name"] in out and "max allocation" in out


def test_devices_json(capsys):
    opencl_runtime()
    assert main(["devices", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["available"] and info["platforms"][0]["devices"]


PROBLEM = ["--h", "5", "--w", "6", "--c", "3", "--k", "4", "--kernel", "3", "--pad", "1"]


def test_tune_cl_writes_the_tuning_file_and_keeps_it(tmp_path, capsys, restore_tuner):
    path = tmp_path / "cl.lws"
    argv = ["tune-cl", "--mode", "rapid", "--file", str(path), "--algorithm", "direct",
            *PROBLEM]
    assert main(argv) == 0
    lines = path.read_text().splitlines()
    assert lines[0] == "lws" and len(lines) == 2 and lines[1].startswith("direct_conv_F32")
    assert "1 kernel configuration(s) tuned" in capsys.readouterr().out
    assert main(argv) == 0                                  # known: nothing new to tune
    assert "0 kernel configuration(s) tuned" in capsys.readouterr().out
    assert path.read_text().splitlines() == lines


def test_tune_cl_needs_something_to_tune(capsys, restore_tuner):
    assert main(["tune-cl", "--mode", "rapid"]) == 2
    assert "say what to tune" in capsys.readouterr().err
