"""The CL tuner: ACL's candidate lists per mode (spec §10), the tuning file, tuning a kernel."""

from __future__ import annotations

import pytest
from opencl_support import assert_matches_reference, data, opencl_runtime

from convsel.errors import InvalidProblemError
from convsel.problem import ConvProblem

pytest.importorskip("pyopencl")

from convsel.backends.opencl import direct, tuner
from convsel.backends.opencl.tuner import CLTuner, candidates

BIG = 1 << 20     # a max work-group size that filters nothing


# -- candidate lists, worked by hand from §10 ------------------------------------------------
def test_rapid_lists():
    # x from {1, 2, 8} up to min(gws_x, 8); y, z from {1, 2} up to min(gws, 4)
    assert tuner.axis_values("rapid", (16, 3, 1)) == ([1, 2, 8], [1, 2], [1])
    assert tuner.axis_values("rapid", (5, 1, 9)) == ([1, 2], [1], [1, 2])
    assert candidates("rapid", (16, 3, 1), BIG) == [
        (2, 1, 1), (8, 1, 1), (1, 2, 1), (2, 2, 1), (8, 2, 1)]


def test_normal_lists():
    # 1, then each i <= min(gws, cap) that is a power of two or divides gws
    assert tuner.axis_values("normal", (12, 6, 1)) == (
        [1, 2, 3, 4, 6, 8, 12], [1, 2, 3, 4, 6], [1])
    # gws_z > 16 relaxes x and y to gws mod i <= 1; z keeps exact division
    assert tuner.axis_values("normal", (10, 7, 17)) == (
        [1, 2, 3, 4, 5, 8, 9, 10], [1, 2, 3, 4, 6, 7], [1, 2, 4, 8, 16, 17])
    # caps 64, 32, 32
    xs, ys, zs = tuner.axis_values("normal", (1000, 1000, 1000))
    assert max(xs) == 64 and max(ys) == 32 and max(zs) == 32


def test_exhaustive_lists_and_order():
    assert candidates("exhaustive", (3, 2, 1), BIG) == [
        (2, 1, 1), (3, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 1)]       # x fastest, no (1,1,1)
    xs, ys, zs = tuner.axis_values("exhaustive", (100, 50, 40))
    assert (xs, ys, zs) == (list(range(1, 65)), list(range(1, 33)), list(range(1, 33)))


def test_candidates_over_the_work_group_limit_are_skipped():
    found = candidates("normal", (64, 32, 1), 64)
    assert found and all(x * y * z <= 64 for x, y, z in found)
    assert (64, 1, 1) in found and (64, 2, 1) not in found
    assert candidates("rapid", (8, 4, 1), 8, max_items=(2, 8, 8)) == [
        (2, 1, 1), (1, 2, 1), (2, 2, 1)]


@pytest.mark.parametrize("value,mode", [("RAPID", "rapid"), (" Normal ", "normal"),
                                        ("exhaustive", "exhaustive"), ("", None),
                                        (None, None), ("off", None)])
def test_parse_mode(value, mode):
    assert tuner.parse_mode(value) == mode


def test_unknown_mode_is_named():
    with pytest.raises(InvalidProblemError, match="fastest"):
        tuner.parse_mode("fastest")


# -- the tuning file ---------------------------------------------------------------------------
def test_file_round_trip(tmp_path):
    path = tmp_path / "t.lws"
    one = CLTuner(path=path)
    one.table = {"direct_conv_F32_a_dev_MP2": (8, 2, 1), "gemm_F16_b_dev_MP2": (0, 0, 0)}
    one.save()
    assert path.read_text().splitlines()[0] == "lws"
    assert "direct_conv_F32_a_dev_MP2;8;2;1" in path.read_text().splitlines()
    assert CLTuner(path=path).table == one.table


def test_legacy_and_wbsm_files_are_read():
    assert tuner.parse_tuning_file("k1;1;2;3\nk2;4;5;6\n") == {"k1": (1, 2, 3), "k2": (4, 5, 6)}
    assert tuner.parse_tuning_file("lws wbsm\nk;4;2;1;-1\n") == {"k": (4, 2, 1)}


@pytest.mark.parametrize("text", ["lws\nkey;1;2\n", "lws\nno separators here\n",
                                  "lws\nkey;a;b;c\n", "lws wbsm\nkey;1;2;3\n",
                                  "lws\nkey;1;-2;3\n"])
def test_corrupt_file_is_reported_and_ignored(tmp_path, text):
    path = tmp_path / "bad.lws"
    path.write_text(text)
    with pytest.warns(tuner.TuningFileWarning, match="corrupt.*line 2"):
        t = CLTuner(mode="rapid", path=path)
    assert t.table == {} and t.mode == "rapid"


def test_unreadable_file_is_reported_and_ignored(tmp_path):
    path = tmp_path / "binary.lws"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.warns(tuner.TuningFileWarning):
        assert CLTuner(path=path).table == {}


def test_off_by_default_and_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(tuner.MODE_ENV, raising=False)
    monkeypatch.delenv(tuner.FILE_ENV, raising=False)
    off = tuner.tuner_from_env()
    assert off.mode is None and off.path is None and not off.active
    monkeypatch.setenv(tuner.MODE_ENV, "Rapid")
    monkeypatch.setenv(tuner.FILE_ENV, str(tmp_path / "x.lws"))
    on = tuner.tuner_from_env()
    assert on.mode == "rapid" and on.path == tmp_path / "x.lws"
    monkeypatch.setenv(tuner.MODE_ENV, "sometimes")
    with pytest.raises(InvalidProblemError, match=tuner.MODE_ENV):
        tuner.tuner_from_env()


# -- tuning real launches ---------------------------------------------------------------------
P = ConvProblem(1, 5, 6, 3, 4, 3, 3, pad=1)


@pytest.fixture()
def rt():
    return opencl_runtime()


def test_tuning_stores_and_then_reuses_a_local_size(rt, tmp_path, monkeypatch):
    path = tmp_path / "tuned.lws"
    t = CLTuner(mode="rapid", path=path)
    monkeypatch.setattr(tuner, "_DEFAULT", t)   # the runtime follows it
    x, w, b = data(P)
    kernel = direct.prepare(P, w, b, {}, rt)
    assert_matches_reference(P, x, w, b, kernel.run(x), "direct")
    key = t.key(rt, kernel.steps[0].config_id)
    assert t.tuned == 1 and key in t.table and key.endswith(rt.tag)
    lws = t.table[key]
    gws = kernel.steps[0].gws
    assert lws == tuner.NO_LWS or lws in candidates("rapid", gws, rt.max_work_group)
    assert CLTuner(path=path).table == t.table                    # saved as it appeared
    again = direct.prepare(P, w, b, {}, rt)
    assert_matches_reference(P, x, w, b, again.run(x), "direct")  # tuned lws applied
    assert t.tuned == 1                                           # and not tuned again


def test_file_without_mode_applies_known_entries_only(rt, tmp_path, monkeypatch):
    x, w, b = data(P)
    kernel = direct.prepare(P, w, b, {}, rt)
    config = kernel.steps[0].config_id
    path = tmp_path / "known.lws"
    path.write_text(f"lws\n{config}_{rt.tag};2;1;1\n")
    t = CLTuner(path=path)
    monkeypatch.setattr(tuner, "_DEFAULT", t)   # the runtime follows it
    assert t.local_size(rt, kernel.steps[0].kernel, kernel.steps[0].gws, config) == (2, 1, 1)
    assert t.local_size(rt, kernel.steps[0].kernel, (4, 4, 4), "unknown") is None
    assert_matches_reference(P, x, w, b, kernel.run(x), "direct")
    assert t.tuned == 0


def test_configure_reaches_a_runtime_that_already_exists(rt, monkeypatch):
    """tune-cl configures the tuner after the runtime exists: the runtime follows it."""
    monkeypatch.setattr(tuner, "_DEFAULT", None)
    made = tuner.configure(None, None)
    assert rt.tuner is made


def test_the_tuner_does_not_import_the_runtime():
    """The runtime hands itself to the tuner at each launch; the tuner module names it only
    through a protocol, so runtime -> tuner is the one edge between them (no circle)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(tuner))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "runtime" not in imported and not any(m and m.endswith(".runtime")
                                                 for m in imported)
