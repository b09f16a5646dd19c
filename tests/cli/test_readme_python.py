"""Every ```python block of the README runs as a user would paste them (issue 25, item 12):
in order, in one namespace, in an empty directory. A block is skipped only when it needs
something this machine lacks, and the skip says what. The one change made to a block: the
client block's ``http://127.0.0.1:8000`` (what ``bash scripts/run.sh`` serves) becomes the URL
of a real ``convsel serve`` started for it, and its model.onnx is made by the README's own
``python benchmarks/make_examples.py``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import warnings

import pytest
from repo import ROOT

README = (ROOT / "README.md").read_text()
README_URL = "http://127.0.0.1:8000"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, source) of every ```python block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


BLOCKS = python_blocks(README)


def _opencl() -> str | None:
    from convsel import backends

    ready = backends.available("opencl")
    return None if ready.ok else f"needs an OpenCL device ({ready.reason})"


def _module(name: str, extra: str) -> str | None:
    return None if importlib.util.find_spec(name) else f"needs {name} (pip install '{extra}')"


def missing(source: str) -> str | None:
    """Why this block cannot run here, or None."""
    if re.search(r"^import torch|torch\.", source, re.M):
        if (why := _module("torch", "convsel[bench]")) is not None:
            return why
    if "pyopencl" in source:   # backend="opencl" alone falls back to numpy, with a warning
        if (why := _opencl()) is not None:
            return why
    if "convsel.client" in source:
        return _module("httpx", "convsel[client]") or _module("uvicorn", "convsel[service]") \
            or _module("onnx", "convsel[onnx]")
    return None


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    """One namespace for every block, run in an empty directory."""
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("readme"))
    try:
        yield {"__name__": "__readme__"}
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def server_url():
    from service_support import served

    # the README's own step before the client's model.onnx: `python benchmarks/make_examples.py`
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_examples.py")], check=True,
                   capture_output=True)
    with served() as (url, _proc):
        yield url


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_block_runs_as_pasted(request, namespace, line, source):
    why = missing(source)
    if why is not None:
        namespace.setdefault("__skipped__", []).append(line)
        pytest.skip(f"README.md:{line}: {why}")
    if README_URL in source:
        source = source.replace(README_URL, request.getfixturevalue("server_url"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a FallbackWarning is an answer, not a failure
        exec(compile(source, f"README.md:{line}", "exec"), namespace)
