"""The direction of flow: a pure selection, policies above it, execution that runs exactly the
resolved parameters, and a library that stands without the service."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from opencl_support import opencl_runtime
from tolerances import tolerance

import convsel
from convsel import algorithms, select
from convsel.errors import RuleFileError
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference
from convsel.rules import default_rules_path, load_rules

ROOT = Path(__file__).resolve().parents[1]
P = ConvProblem(1, 14, 14, 16, 16, 3, 3, pad=1)


def _rules_with_cpu_tile(tmp_path: Path, tile: list[int]) -> Path:
    data = yaml.safe_load(default_rules_path().read_text())
    data["cpu"]["winograd"]["F32"].insert(0, {"kernel": [3, 3], "tile": tile})
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_a_tile_a_rules_file_adds_runs_on_every_winograd_backend(tmp_path, backend):
    """The reproduced bug: a 6x6 tile for 3x3 F32 kernels on the CPU was selected, then
    refused by the numpy backend, which read the packaged rules instead of the caller's."""
    if backend == "opencl":
        opencl_runtime()
    rules = _rules_with_cpu_tile(tmp_path, [6, 6])
    sel = select(P, "cpu", rules=str(rules))
    assert (sel.algorithm, sel.params["tile"]) == ("winograd", (6, 6))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(P.input_shape).astype(np.float32)
    w = rng.standard_normal(P.weights_shape).astype(np.float32)
    op = convsel.prepare(P, w, rules=str(rules), backend=backend)
    assert (op.algorithm, op.backend, op.params["tile"]) == ("winograd", backend, (6, 6))
    y = op.run(x)
    ref = conv2d_reference(P, x, w, None)
    scale = conv2d_reference(P, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             None).max()
    assert np.abs(y - ref).max() / scale <= tolerance("winograd", "F32")


def test_a_tile_no_backend_can_transform_is_refused_with_the_rules_file(tmp_path):
    rules = _rules_with_cpu_tile(tmp_path, [20, 20])
    with pytest.raises(RuleFileError, match="tile"):
        load_rules(rules)


def test_selection_imports_nothing_above_it():
    code = ("import sys, convsel.selection, convsel\n"
            "from convsel import ConvProblem, select\n"
            "select(ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1), 'G77')\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyopencl', 'fastapi') or "
            "m.startswith(('convsel.tuning', 'convsel.api', 'convsel.backends', "
            "'convsel.execute', 'convsel.policies.measured', 'service'))]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def _imports(path: Path) -> set[str]:
    """The convsel modules a file imports (absolute names), at any depth of the file."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module[:-9]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found |= {name} | {f"{name}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {n for n in found if n.startswith(("convsel", "service"))}


LAYERS = ["selection", "policies", "api", "execute", "tuning", "backends"]


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_no_import_cycle_between_the_layers():
    edges: set[tuple[str, str]] = set()
    for path in (ROOT / "convsel").rglob("*.py"):
        src = _layer(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if src is None:
            continue
        for name in _imports(path):
            dst = _layer(name)
            if dst and dst != src:
                edges.add((src, dst))
    order = {"selection": 0, "backends": 1, "execute": 2, "tuning": 3, "policies": 4, "api": 5}
    upward = sorted((a, b) for a, b in edges if order[b] > order[a])
    assert upward == [], f"imports that point up the layers: {upward}"


def test_the_library_never_imports_the_service():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "convsel").rglob("*.py")
                 if any(n == "service" or n.startswith("service.") for n in _imports(p))]
    assert offenders == []


def test_backends_never_read_the_rules():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "convsel/backends").rglob("*.py")
                 if any(n.startswith(("convsel.rules", "convsel.selection",
                                      "convsel.policies")) for n in _imports(p))]
    assert offenders == []


def test_every_list_of_algorithms_comes_from_the_registry():
    from convsel.backends import IMPLEMENTATIONS
    from convsel.evaluation.render import _ALGORITHM_COLOURS

    assert set(_ALGORITHM_COLOURS) == set(algorithms.ALGORITHMS)
    assert {a for a, _ in IMPLEMENTATIONS} == set(algorithms.ALGORITHMS)
    assert set(algorithms.TIMING_ORDER) == set(algorithms.ALGORITHMS)
    for spec in algorithms.SPECS.values():
        assert spec.cpu_method in algorithms.METHOD_ALGORITHMS
        assert spec.gpu_method in algorithms.METHOD_ALGORITHMS


def test_the_packaged_layer_file_is_the_shared_one():
    from convsel.tuning.layers import default_layer_file, load_layers

    packaged = default_layer_file()
    layers, _ = load_layers()
    assert {x.net for x in layers} >= {"resnet50", "mobilenet_v2", "vgg16"}
    shared = ROOT.parent / "shared" / "data" / "layers.json"
    if shared.is_file():   # CI has it beside the clone: the shipped copy must not drift
        assert json.loads(packaged.read_text()) == json.loads(shared.read_text())


# What `pip install convsel` (no extras) lacks: the packages of the extras.
_EXTRAS_ONLY = ("fastapi", "uvicorn", "starlette", "multipart", "prometheus_client",
                "pydantic_settings", "pyopencl", "matplotlib", "onnx", "httpx", "service")
_BLOCKER = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {_EXTRAS_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (extra not installed)")
        return None
sys.meta_path.insert(0, Block())
"""


def _without_extras(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCKER + code], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_the_library_works_without_any_extra():
    code = ("import numpy as np, convsel\n"
            "from convsel.cli import main\n"
            "rc = main(['select', '--h', '14', '--w', '14', '--c', '8', '--k', '8', "
            "'--kernel', '3', '--pad', '1'])\n"
            "x = np.ones((1, 6, 6, 4), np.float32); w = np.ones((4, 3, 3, 4), np.float32)\n"
            "y = convsel.conv2d(x, w, pad=1)\n"
            "print('RESULT', rc, y.shape, float(y[0, 2, 2, 0]))\n")
    out = _without_extras(code)
    assert out.returncode == 0, out.stderr
    assert "RESULT 0 (1, 6, 6, 4) 36.0" in out.stdout


def test_serve_without_the_service_extra_names_it_and_exits_2():
    out = _without_extras("import sys\nfrom convsel.cli import main\n"
                          "sys.exit(main(['serve']))\n")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'convsel[service]'" in lines[0]
