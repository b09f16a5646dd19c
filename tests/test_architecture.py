"""The direction of flow: a pure selection, policies above it, execution that runs exactly the
resolved parameters, and a library that stands without the service."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Collection, Mapping
from dataclasses import dataclass
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


# ---- the import graph ------------------------------------------------------------------------
# Every import of convsel/ and service/, as the ast sees it: at the top of a module, inside a
# function, under TYPE_CHECKING, and modules named by a string (importlib.import_module,
# a lazy-import table, uvicorn's "module:attribute"). An edge goes to the module named, not to
# the packages Python runs on the way (`import convsel.tuning.db` runs convsel/__init__ too,
# which would make every package that imports its own submodules a circle).

PACKAGES = ("convsel", "service")
# a dotted name, optionally "module:attribute": the form in which strings name modules
_MODULE_TEXT = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+(?::[\w.]+)?")


@dataclass(frozen=True)
class Import:
    source: str               # the importing module
    target: str               # the imported module
    names: tuple[str, ...]    # the names taken from it (`from target import a, b`); () for a module
    where: str                # "top", "function", "type-checking" or "string"
    line: int


def _module_files(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _where(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """Where an import statement sits: in a function, under ``if TYPE_CHECKING:``, or at the
    top level of the module (which includes try/except and plain if blocks)."""
    place = "top"
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return "function"
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            place = "type-checking"
    return place


def import_sites(source: str, module: str, is_package: bool,
                 known: Collection[str]) -> list[Import]:
    """Every import in ``source`` (the text of ``module``) of a module in ``known``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            names = []
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                if sub in known:        # `from convsel import backends`: the module itself
                    found.append(Import(module, sub, (), _where(node, parents), node.lineno))
                else:
                    names.append(alias.name)
            if names and name in known:
                found.append(Import(module, name, tuple(names), _where(node, parents),
                                    node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:   # `import a.b.c` where a.b.c is a name
                    name = name.rpartition(".")[0]
                if name:
                    found.append(Import(module, name, (), _where(node, parents), node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and _MODULE_TEXT.fullmatch(node.value):
            name = node.value.split(":")[0]
            if name in known:
                found.append(Import(module, name, (), "string", node.lineno))
    return [i for i in found if i.target != module]


@functools.cache
def all_imports() -> tuple[Import, ...]:
    files = _module_files()
    return tuple(i for module, path in files.items()
                 for i in import_sites(path.read_text(), module, path.name == "__init__.py",
                                       files))


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in _module_files()}
    for i in all_imports():
        graph[i.source].add(i.target)
    return graph


def strongly_connected(graph: Mapping[str, Collection[str]]) -> list[frozenset[str]]:
    """The circles of ``graph``: its strongly connected components of more than one module
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                circles.append(frozenset(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_the_graph_sees_every_kind_of_import():
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        from . import b
        from .. import errors, ConvProblem
        import convsel.tuning.db as db
        if TYPE_CHECKING:
            from .c import C
        LAZY = {"x": "convsel.api", "app": "service.app:create_app", "words": "convsel api"}
        def f():
            from convsel.finder import find
            return find
    """)
    known = {"convsel", "convsel.errors", "convsel.pkg", "convsel.pkg.b", "convsel.pkg.c",
             "convsel.api", "convsel.finder", "convsel.tuning", "convsel.tuning.db", "service.app"}
    found = {(i.target, i.names, i.where) for i in import_sites(source, "convsel.pkg.a", False,
                                                                 known)}
    assert found == {("convsel.pkg.b", (), "top"), ("convsel.errors", (), "top"),
                     ("convsel", ("ConvProblem",), "top"), ("convsel.tuning.db", (), "top"),
                     ("convsel.pkg.c", ("C",), "type-checking"), ("convsel.api", (), "string"),
                     ("service.app", (), "string"), ("convsel.finder", ("find",), "function")}


def test_strongly_connected_finds_every_circle():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert set(strongly_connected(graph)) == {frozenset("ab"), frozenset("cde")}


def test_no_import_circle():
    """Module by module, function-level, TYPE_CHECKING and string imports included."""
    circles = [sorted(c) for c in strongly_connected(_graph())]
    assert circles == [], f"import circles: {circles}"


LAYERS = ["selection", "policies", "api", "execute", "tuning", "backends"]


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "convsel" and parts[1] in LAYERS else None


def test_no_layer_imports_one_above_it():
    order = {"selection": 0, "backends": 1, "execute": 2, "tuning": 3, "policies": 4, "api": 5}
    upward = sorted({(i.source, i.target) for i in all_imports()
                     if _layer(i.source) and _layer(i.target)
                     and order[_layer(i.target)] > order[_layer(i.source)]})
    assert upward == [], f"imports that point up the layers: {upward}"


# `convsel serve` is the service's launcher: its one import of the service, when the command
# runs, is the only one the library makes.
LAUNCHER = Import("convsel.cli.serve_cmd", "service.server", ("serve",), "function", 0)


def test_the_library_never_imports_the_service():
    offenders = [i for i in all_imports()
                 if i.source.partition(".")[0] == "convsel" and i.target.startswith("service")]
    assert [(i.source, i.target, i.names, i.where) for i in offenders] == [
        (LAUNCHER.source, LAUNCHER.target, LAUNCHER.names, LAUNCHER.where)]


def test_backends_never_read_the_rules():
    offenders = sorted({(i.source, i.target) for i in all_imports()
                        if i.source.startswith("convsel.backends")
                        and i.target.startswith(("convsel.rules", "convsel.selection",
                                                 "convsel.policies"))})
    assert offenders == []


# What the service may import from the library: the front door and the packages' public
# faces, plus the vocabulary modules whose names the wire format states. Never an inner module
# (convsel.tuning.db, convsel.learn.stored, convsel.policies.predicted, convsel.api, ...).
SERVICE_MAY_IMPORT = {
    "convsel": "choose/select/prepare/conv2d/find/plan, ConvProblem, Rules, the errors",
    "convsel.config": "the library's settings, which the service's Settings extend",
    "convsel.arguments": "the front door's checks, for the server's own defaults and limits",
    "convsel.tuning": "the tuning store: open a database, its default, the device key",
    "convsel.learn": "fit and store the predicted policy's model",
    "convsel.policies": "the policies by name, their options, the model in use",
    "convsel.onnx": "read a model to plan it",
    "convsel.algorithms": "the algorithm registry: names and descriptions",
    "convsel.backends": "the backends: names, availability, describe()",
    "convsel.problem": "dtypes and layouts a problem takes",
    "convsel.activation": "the activation kinds",
    "convsel.layouts": "the weights layouts",
    "convsel.targets": "the targets' names",
    "convsel.rules": "ACL's methods, the packaged rules file",
    "convsel.verdict": "a backend's availability (Verdict)",
}


def _public(module: str) -> set[str] | None:
    """``module.__all__``, or None where the module has none."""
    declared = getattr(importlib.import_module(module), "__all__", None)
    return None if declared is None else set(declared)


def test_the_service_imports_only_the_librarys_public_modules():
    library = [i for i in all_imports()
               if i.source.startswith("service") and i.target.partition(".")[0] == "convsel"]
    assert library, "the graph found no import of the library by the service"
    inner = sorted({(i.source, i.target) for i in library if i.target not in SERVICE_MAY_IMPORT})
    assert inner == [], f"the service reaches past the library's public modules: {inner}"
    private = sorted({(i.source, i.target, name) for i in library for name in i.names
                      if name.startswith("_") and name != "__version__"
                      or name not in (_public(i.target) or {name})})
    assert private == [], f"names the library does not export: {private}"


def test_routes_are_mounted_explicitly_and_never_import_one_another():
    routes = [i for i in all_imports() if i.source.startswith("service.routes.")
              and i.target.startswith("service.routes.")]
    assert routes == []
    strings = {(i.source, i.target) for i in all_imports()
               if i.source.startswith("service") and i.where == "string"}
    # uvicorn's workers import the app factory by its name; nothing else is loaded by text
    assert strings == {("service.server", "service.app")}
    dynamic = sorted(str(path.relative_to(ROOT)) for module, path in _module_files().items()
                     if module.startswith("service") and any(
                         isinstance(node, (ast.Import, ast.ImportFrom)) and "importlib" in
                         ast.unparse(node) for node in ast.walk(ast.parse(path.read_text()))))
    assert dynamic == [], "the service imports its modules by name, never through importlib"


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
