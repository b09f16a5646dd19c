"""One front door: each argument is checked once, by one helper, whose rule is written once.

The grep half reads every raise in convsel/ and service/ (its message text and the field it
names) and every membership test against the lists of backends and policies; the behaviour
half asks every public entry point the same wrong question and expects the same answer.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from repo import ROOT

import convsel
from convsel import ConvProblem, algorithms, arguments, execute
from convsel.errors import InvalidProblemError, UnsupportedError, WorkspaceLimitError
from convsel.policies import POLICIES, POLICY_OPTIONS, get_policy, policy_options

# Each rule's text (a phrase of its message), and the one module allowed to write it.
RULE_TEXTS = {
    "unknown backend": "convsel/arguments.py",
    "must be an integer >=": "convsel/arguments.py",
    "must be a number > 0": "convsel/arguments.py",
    "best-predicted candidates to time": "convsel/arguments.py",
    "time an unseen problem on first use": "convsel/arguments.py",
    "unknown policy": "convsel/policies/__init__.py",
    "no options": "convsel/policies/__init__.py",
}
# The arguments whose check raises InvalidProblemError naming them, and where that check is.
CHECKED_FIELDS = {
    "backend": "convsel/arguments.py",
    "max_workspace_bytes": "convsel/arguments.py",
    "budget_s": "convsel/arguments.py",
    "tune_budget_s": "convsel/arguments.py",
    "tune": "convsel/arguments.py",
    "top": "convsel/arguments.py",
    "policy": "convsel/policies/__init__.py",
}
# The lists an argument is checked against: a membership test is a check.
CHECKED_LISTS = {"BACKENDS": "convsel/arguments.py", "POLICIES": "convsel/policies/__init__.py"}

# Service modules that still check for themselves (the service's part of issue 21): each
# entry must go once the service calls convsel.arguments / get_policy; a stale entry fails.
SERVICE_PENDING: set[tuple[str, str]] = set()   # none left: it calls convsel.arguments


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for top in ("convsel", "service"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text())


def _text(node: ast.AST) -> str:
    """The literal text of a message: string constants and f-string parts, joined."""
    return "".join(n.value for n in ast.walk(node)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _findings() -> dict[tuple[str, str], int]:
    """(module, what) -> how many times: rule texts raised, fields an InvalidProblemError
    names, membership tests against a checked list."""
    found: dict[tuple[str, str], int] = {}
    for module, tree in _sources():
        for node in ast.walk(tree):
            keys: list[str] = []
            # a rule is written where an error is raised, or where arguments.whole_number
            # (which raises it) is handed its field and meaning
            call = (node.exc if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    else node if isinstance(node, ast.Call) and _name(node.func) == "whole_number"
                    else None)
            if call is not None:
                text = _text(call)
                keys += [phrase for phrase in RULE_TEXTS if phrase in text]
                first = call.args[0] if call.args else None
                if (_name(call.func) in ("InvalidProblemError", "whole_number")
                        and isinstance(first, ast.Constant) and first.value in CHECKED_FIELDS):
                    keys.append(first.value)
            elif isinstance(node, ast.Compare) and any(
                    isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                keys += [n for n in CHECKED_LISTS if any(_name(c) == n
                                                         for c in node.comparators)]
            for key in keys:
                found[(module, key)] = found.get((module, key), 0) + 1
    return found


def test_every_rule_text_field_and_list_check_is_written_in_one_place():
    found = _findings()
    homes = {**RULE_TEXTS, **CHECKED_FIELDS, **CHECKED_LISTS}
    elsewhere = sorted((module, key) for (module, key) in found
                       if module != homes[key] and (module, key) not in SERVICE_PENDING)
    assert elsewhere == [], "checked again outside its helper (call convsel.arguments)"
    # the search still finds what it looks for (a renamed rule would pass unseen otherwise)
    for key, home in {**RULE_TEXTS, **CHECKED_LISTS, "backend": "convsel/arguments.py",
                      "policy": "convsel/policies/__init__.py"}.items():
        assert found.get((home, key), 0) >= 1, f"{key!r} is no longer checked in {home}"
    for phrase, home in RULE_TEXTS.items():
        assert found[(home, phrase)] == 1, f"{phrase!r} is written {found[(home, phrase)]}x"


def test_the_services_pending_duplicates_still_exist():
    """When the service routes a check through the library, its entry here goes too."""
    found = _findings()
    assert sorted(SERVICE_PENDING - set(found)) == []


# -- every entry point, the same answer ----------------------------------------------------
P = ConvProblem(1, 8, 8, 4, 4, 3, 3, pad=1)
W = np.zeros(P.weights_shape, np.float32)
X = np.zeros(P.input_shape, np.float32)


def _model() -> bytes:
    pytest.importorskip("onnx")
    from onnx_models import Chain

    return Chain((1, 4, 8, 8)).conv(4, 3, name="conv", pads=[1] * 4).model().SerializeToString()


ENTRY_POINTS = {
    "select": lambda **kw: convsel.select(P, **kw),
    "choose": lambda **kw: convsel.choose(P, **kw),
    "prepare": lambda **kw: convsel.prepare(P, W, **kw),
    "conv2d": lambda **kw: convsel.conv2d(X, W, pad=1, **kw),
    "find": lambda **kw: convsel.find(P, **kw),
    "plan": lambda **kw: convsel.plan(_model(), "cpu", **kw),
}
BAD_BACKEND = {
    "select": {"backend": "cuda"},
    "choose": {"workspace_backend": "cuda"},
    "prepare": {"backend": "cuda"},
    "conv2d": {"backend": "cuda"},
    "find": {"backend": "cuda"},
    "plan": {"policy": "measured", "backend": "cuda"},
}


def _refusal(entry: str, kwargs: dict) -> InvalidProblemError:
    with pytest.raises(InvalidProblemError) as info:
        ENTRY_POINTS[entry](**kwargs)
    return info.value


def _expected(field: str, value, check) -> str:
    with pytest.raises(InvalidProblemError) as info:
        check(value)
    assert info.value.field == field
    return info.value.rule


@pytest.mark.parametrize("entry", sorted(BAD_BACKEND))
def test_every_entry_point_refuses_an_unknown_backend_alike(entry):
    err = _refusal(entry, BAD_BACKEND[entry])
    assert (err.field, err.value, err.rule) == (
        "backend", "cuda", _expected("backend", "cuda", arguments.backend))


@pytest.mark.parametrize("entry", ["select", "choose", "prepare", "conv2d", "find"])
@pytest.mark.parametrize("bad", [-1, 1.5, "1MB", True])
def test_every_entry_point_refuses_a_bad_workspace_limit_alike(entry, bad):
    err = _refusal(entry, {"max_workspace_bytes": bad})
    assert (err.field, err.rule) == (
        "max_workspace_bytes", _expected("max_workspace_bytes", bad, arguments.workspace_limit))


@pytest.mark.parametrize("entry", ["choose", "prepare", "conv2d", "plan"])
def test_every_entry_point_refuses_an_unknown_policy_alike(entry):
    err = _refusal(entry, {"policy": "fastest"})
    assert (err.field, err.value) == ("policy", "fastest")
    assert err.rule == _expected("policy", "fastest", get_policy)


@pytest.mark.parametrize("entry, kwargs", [
    ("choose", {"db": "t.sqlite"}), ("prepare", {"db": "t.sqlite"}),
    ("prepare", {"tune": "auto"}), ("conv2d", {"tune_budget_s": 5}),
    ("plan", {"db": "t.sqlite"}),   # plan's backend is where the Convs run: not refused
])
def test_an_option_the_policy_does_not_take_names_the_policies_that_do(entry, kwargs):
    err = _refusal(entry, kwargs)
    field = next(iter(kwargs))
    assert err.field == field
    assert err.rule.startswith("policy 'acl' takes no options; ")
    assert err.rule.endswith(" or ".join(n for n in POLICIES if field in policy_options(n)))


# -- policy options come from the policies ---------------------------------------------------
def test_policy_options_are_the_policy_classes_fields():
    from convsel.policies.composed import MeasuredPolicy
    from convsel.policies.predicted import PredictedPolicy

    for name, cls in [("measured", MeasuredPolicy), ("predicted", PredictedPolicy)]:
        assert POLICY_OPTIONS[name] == tuple(f.name for f in dataclasses.fields(cls))
    assert POLICY_OPTIONS["acl"] == ()
    assert set(POLICY_OPTIONS) == set(POLICIES)


def test_a_field_added_to_a_policy_is_an_option_at_once(monkeypatch):
    from convsel.policies.acl import AclPolicy

    @dataclasses.dataclass(frozen=True)
    class Patient(AclPolicy):
        patience: int = 1

    monkeypatch.setitem(POLICIES, "patient", lambda: Patient)
    assert POLICY_OPTIONS["patient"] == ("patience",)
    assert get_policy("patient", patience=3) == Patient(patience=3)
    assert convsel.choose(P, policy="patient", patience=3).algorithm
    with pytest.raises(InvalidProblemError, match="policy 'patient' takes patience"):
        get_policy("patient", backend="numpy")


def test_option_values_are_checked_by_the_argument_helpers():
    with pytest.raises(InvalidProblemError) as info:
        get_policy("measured", tune="sometimes")
    assert info.value.rule == _expected("tune", "sometimes", arguments.tune)
    assert get_policy("measured", tune="auto").tune is True    # normalised once, here


def test_a_policy_object_takes_no_options_beside_it():
    with pytest.raises(InvalidProblemError, match="policy object"):
        convsel.choose(P, policy=get_policy("acl"), backend="numpy")


# -- the workspace limit, before anything is built --------------------------------------------
BIG = ConvProblem(1, 56, 56, 64, 64, 3, 3, pad=1)


def _recording_build_on(monkeypatch, fail_on: str | None = None) -> list[str]:
    built: list[str] = []
    real = execute.build_on

    def build_on(p, algorithm, params, backend, *args, **kwargs):
        built.append(backend)
        if backend == fail_on:
            raise UnsupportedError(f"{backend} is switched off by the test", backend=backend)
        return real(p, algorithm, params, backend, *args, **kwargs)

    monkeypatch.setattr(execute, "build_on", build_on)
    return built


def test_a_named_algorithm_over_the_limit_is_refused_before_it_is_built(monkeypatch):
    built = _recording_build_on(monkeypatch)
    w = np.zeros(BIG.weights_shape, np.float32)
    need = algorithms.workspace_bytes("winograd", BIG, {"tile": (4, 4)}, "numpy")
    with pytest.raises(WorkspaceLimitError, match="max_workspace_bytes") as info:
        convsel.prepare(BIG, w, algorithm="winograd", tile=(4, 4), max_workspace_bytes=need - 1)
    assert (info.value.needed, info.value.limit) == (need, need - 1) and built == []
    op = convsel.prepare(BIG, w, algorithm="winograd", tile=(4, 4), max_workspace_bytes=need)
    assert op.workspace_bytes <= need and built == ["numpy"]


def test_a_fallback_that_would_not_fit_is_refused_too(monkeypatch):
    """winograd 4x4 needs less workspace on OpenCL than on numpy: a limit between the two
    admits it on OpenCL, and must not build the numpy fallback over it."""
    w = np.zeros(BIG.weights_shape, np.float32)
    on_cl = algorithms.workspace_bytes("winograd", BIG, {"tile": (4, 4)}, "opencl")
    on_np = algorithms.workspace_bytes("winograd", BIG, {"tile": (4, 4)}, "numpy")
    assert on_cl < on_np, "the test needs an algorithm whose numpy workspace is larger"
    built = _recording_build_on(monkeypatch, fail_on="opencl")
    with pytest.raises(WorkspaceLimitError, match="numpy fallback does not fit"):
        convsel.prepare(BIG, w, algorithm="winograd", tile=(4, 4), backend="opencl",
                        max_workspace_bytes=on_cl)
    assert built == ["opencl"]
    with pytest.warns(convsel.FallbackWarning):
        op = convsel.prepare(BIG, w, algorithm="winograd", tile=(4, 4), backend="opencl",
                             max_workspace_bytes=on_np)
    assert op.backend == "numpy" and built == ["opencl", "opencl", "numpy"]


def test_nothing_fits_is_a_workspace_limit_error():
    with pytest.raises(WorkspaceLimitError, match="max_workspace_bytes=0") as info:
        convsel.select(BIG, max_workspace_bytes=0)
    assert info.value.limit == 0 and isinstance(info.value, UnsupportedError)


def test_the_front_door_module_imports_nothing_above_the_selection():
    tree = ast.parse(Path(arguments.__file__).read_text())
    top_level = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level}
    assert top_level <= {"", None, "errors", "layouts", "problem"}, top_level
