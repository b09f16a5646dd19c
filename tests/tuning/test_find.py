"""convsel.find (ranked, like cudnnFind), `convsel find` and POST /v1/find."""

from __future__ import annotations

import json

import numpy as np
import pytest
from service_support import assert_error, client_for

import convsel
from convsel import ConvProblem, algorithms
from convsel.cli import main
from convsel.errors import InvalidProblemError
from convsel.tuning.db import TuningDB
from convsel.tuning.identity import device_identity
from convsel.tuning.timing import TimingSettings

P = ConvProblem(1, 10, 10, 8, 8, 3, 3, pad=1)        # every algorithm, two Winograd tiles
FAST = TimingSettings(warmup=1, min_runs=3, min_time=0.0, max_runs=6, rounds=2)
SMALL = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}


def test_find_ranks_every_algorithm_and_variant():
    r = convsel.find(P, settings=FAST)
    labels = {e.label for e in r.results}
    variants = {algorithms.label_of(a, params) for a in algorithms.ALGORITHMS
                if algorithms.supports(a, P, convsel.load_rules()).ok
                and "numpy" in algorithms.spec(a).backends
                for params in algorithms.variants(a, P, convsel.load_rules())}
    assert variants <= labels                             # winograd:2x2 and winograd:4x4
    assert "gemm_1x1" in labels                           # unsupported, with the reason
    opencl_only = next(e for e in r.results if e.label == "implicit_gemm")
    assert opencl_only.status == "unsupported" and "numpy" in opencl_only.reason
    ok = [e for e in r.results if e.status == "ok"]
    assert [e.rank for e in ok] == list(range(1, len(ok) + 1))
    medians = [e.median_s for e in ok]
    assert medians == sorted(medians) and all(e.iqr_s is not None and e.runs for e in ok)
    assert all(e.workspace_bytes is not None for e in ok)
    assert {e.clock for e in ok} == {"wall"}              # numpy kernels have no device clock
    gemm = next(e for e in r.results if e.label == "gemm_1x1")
    assert gemm.status == "unsupported" and "1x1" in gemm.reason and gemm.rank is None
    acl = convsel.select(P)
    assert r.best is ok[0] and r.acl == algorithms.label_of(acl.algorithm, acl.params)
    assert (r.winner == ok[0].label) or (ok[0].label in r.tie)
    assert r.stored is False


def test_find_workspace_excludes_with_status_and_reason():
    sizes = {e.label: e.workspace_bytes for e in convsel.find(P, settings=FAST).results
             if e.status == "ok"}
    limit = sorted(sizes.values())[len(sizes) // 2]
    r = convsel.find(P, settings=FAST, max_workspace_bytes=limit)
    for e in r.results:
        if e.label in sizes and sizes[e.label] > limit:
            assert e.status == "excluded-by-workspace" and "workspace" in e.reason
            assert e.workspace_bytes == sizes[e.label]
        elif e.label in sizes:
            assert e.status == "ok"
    assert any(e.status == "excluded-by-workspace" for e in r.results)


def test_find_times_the_callers_weights_and_stores_in_the_database(tmp_path):
    w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)   # OIHW
    db = tmp_path / "t.sqlite"
    r = convsel.find(P, w, weights_layout="OIHW", settings=FAST, store=True, db=db)
    assert r.stored and r.database == str(db)
    entry = TuningDB(db).lookup(P, "numpy", device_identity("numpy"))
    assert entry is not None and (entry.winner, entry.tie) == (r.winner, r.tie)
    sel = convsel.choose(P, policy="measured", db=str(db))
    assert sel.source == "tuning-db"


def test_find_cut_short_by_the_budget_is_not_stored(tmp_path):
    r = convsel.find(P, settings=TimingSettings(min_time=5.0, max_runs=10_000), budget_s=0.05,
                     store=True, db=tmp_path / "t.sqlite")
    assert not r.complete and not r.stored and "not stored" in r.note
    assert any(e.status == "skipped" for e in r.results) or any(
        e.status == "ok" for e in r.results)


@pytest.mark.parametrize("kwargs,field", [
    ({"backend": "cuda"}, "backend"), ({"max_workspace_bytes": -1}, "max_workspace_bytes"),
    ({"budget_s": 0}, "budget_s"), ({"w": np.zeros((3, 3, 3, 3), np.float32)}, "w"),
])
def test_find_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(InvalidProblemError) as info:
        convsel.find(P, **kwargs)
    assert info.value.field == field


def test_find_cli_json_and_text(capsys, tmp_path):
    base = ["find", "--h", "6", "--w", "6", "--c", "4", "--k", "4", "--kernel", "3", "--pad",
            "1"]
    assert main(base + ["--json", "--max-workspace-bytes", "100000000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"][0]["rank"] == 1 and doc["results"][0]["status"] == "ok"
    assert {"median_ms", "iqr_ms", "workspace_bytes", "reason"} <= set(doc["results"][0])
    assert main(base + ["--store", "--db", str(tmp_path / "d.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "status" in out and "stored in" in out
    assert main(base + ["--db", "x"]) == 2


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "tuning.sqlite"))
    with client_for(tuning_db=tmp_path / "tuning.sqlite") as c:
        yield c


def test_find_route_ranks_and_stores(client):
    r = client.post("/v1/find", json={"problem": SMALL, "budget_s": 20, "store": True})
    assert r.status_code == 200, r.text
    body = r.json()
    ok = [e for e in body["results"] if e["status"] == "ok"]
    assert ok and ok[0]["rank"] == 1 and body["stored"] is True and ok[0]["clock"] == "wall"
    assert [e["median_ms"] for e in ok] == sorted(e["median_ms"] for e in ok)
    sel = client.post("/v1/select", json={"problem": SMALL, "policy": "measured"}).json()
    assert sel["source"] == "tuning-db"


def test_find_route_caps_the_workspace_at_the_servers_limit(tmp_path):
    with client_for(tuning_db=tmp_path / "t.sqlite", max_workspace_bytes=0) as c:
        body = c.post("/v1/find", json={"problem": SMALL, "max_workspace_bytes": 10**9}).json()
    assert body["max_workspace_bytes"] == 0
    for e in body["results"]:
        assert e["status"] != "ok" or e["workspace_bytes"] == 0


def test_find_route_bounds_and_errors(client):
    from service import timing

    assert_error(client.post("/v1/find", json={"problem": SMALL, "budget_s": 1e6}), 422,
                 "validation_error")
    assert_error(client.post("/v1/find", json={"problem": {**SMALL, "pad": 9}}), 422,
                 "invalid_problem")
    big = {**SMALL, "h": 4000, "w": 4000, "c": 512}
    assert_error(client.post("/v1/find", json={"problem": big}), 413, "too_large")
    assert timing._running.acquire(blocking=False)   # /v1/tune running: find waits its turn
    try:
        r = client.post("/v1/find", json={"problem": SMALL})
    finally:
        timing._running.release()
    assert_error(r, 503, "busy")


def test_find_route_requires_the_token_when_set(tmp_path):
    with client_for(api_token="s3cret", tuning_db=tmp_path / "tuning.sqlite") as client:
        _token_checks(client)
        spec = client.get("/openapi.json").json()
        assert "401" in spec["paths"]["/v1/find"]["post"]["responses"]


def _token_checks(client):
    r = client.post("/v1/find", json={"problem": SMALL})
    assert_error(r, 401, "unauthorized")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    wrong = client.post("/v1/find", json={"problem": SMALL},
                        headers={"Authorization": "Bearer nope"})
    assert_error(wrong, 401, "unauthorized")
    good = client.post("/v1/find", json={"problem": SMALL, "budget_s": 20},
                       headers={"Authorization": "Bearer s3cret"})
    assert good.status_code == 200, good.text


def test_find_is_in_the_openapi_schema(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/find"]["post"]
    assert {"200", "413", "422", "503"} <= set(post["responses"])
    assert "FindRequest" in spec["components"]["schemas"]


def test_find_and_the_client_without_extras():
    """`pip install convsel` alone: find works; the client says which extra it needs."""
    from test_architecture import _without_extras

    out = _without_extras("import sys\nfrom convsel.cli import main\n"
                          "sys.exit(main(['find', '--h', '6', '--w', '6', '--c', '4', '--k', "
                          "'4', '--kernel', '3', '--pad', '1', '--json']))\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["rank"] == 1
    out = _without_extras("import convsel.client\n")
    assert out.returncode != 0 and "pip install 'convsel[client]'" in out.stderr
