"""The README's newcomer path has no dead ends: the test command comes before the blocking
server, the curl examples' files are made by a command the README gives, and measured
selection names its database."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from repo import ROOT
from service_support import client_for

README = (ROOT / "README.md").read_text()


def test_the_test_command_comes_before_the_blocking_server():
    assert README.index("bash scripts/test.sh") < README.index("bash scripts/run.sh")


def test_measured_select_names_its_database():
    lines = [x for x in README.splitlines() if "convsel select" in x and "measured" in x
             and x.lstrip().startswith("convsel")]
    assert lines and all("--db" in x for x in lines)


def test_the_files_of_the_curl_examples_are_made_first(tmp_path):
    made = README.index("python benchmarks/make_examples.py")
    for use in ("x=@x.npy", "w=@w.npy", "model=@model.onnx"):
        assert made < README.index(use), use
    pytest.importorskip("onnx")
    subprocess.run([sys.executable, str(ROOT / "benchmarks/make_examples.py"), str(tmp_path)],
                   check=True, capture_output=True)
    problem = re.search(r"-F 'problem=(\{[^']*\})'", README).group(1)
    with client_for() as c:
        files = {name: (f"{name}.npy", (tmp_path / f"{name}.npy").read_bytes())
                 for name in ("x", "w")}
        r = c.post("/v1/conv2d", data={"problem": problem}, files=files,
                   headers={"accept": "application/x-npy"})
        assert r.status_code == 200, r.text
        plan = c.post("/v1/plan", files={"model": ("model.onnx",
                                                   (tmp_path / "model.onnx").read_bytes())},
                      data={"target": "G77"})
        assert plan.status_code == 200, plan.text
        assert json.loads(plan.text)["summary"]["convolutions"] == 2


def test_the_torch_mapping_is_documented():
    assert "torch.nn.functional.conv2d" in README
    assert 'layout="NCHW"' in README and 'weights_layout="OIHW"' in README
