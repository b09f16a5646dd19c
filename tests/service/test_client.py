"""convsel.client.Client against a REAL server: `convsel serve` on a free loopback port."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from service_support import convsel_command, free_port, wait_ready

import convsel
from convsel import ConvProblem
from convsel.client import Client, TooLargeError, UnauthorizedError
from convsel.errors import InvalidProblemError, UnknownTargetError, UnsupportedError

TOKEN = "client-test-token"
P = ConvProblem(1, 12, 12, 8, 16, 3, 3, pad=1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    where = tmp_path_factory.mktemp("client")
    db = where / "tuning.sqlite"
    env = {**os.environ, "CONVSEL_API_TOKEN": TOKEN, "CONVSEL_TUNING_DB": str(db),
           "CONVSEL_MAX_TENSOR_ELEMENTS": str(300_000)}
    # the server's output goes to a file: a pipe nobody reads fills up (one log line per
    # request) and blocks the server mid-answer
    log = open(where / "server.log", "w")   # noqa: SIM115 - closed in the finally
    proc = subprocess.Popen([*convsel_command(), "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1", "--log-level", "warning"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def client(server):
    with Client(server, token=TOKEN) as c:
        yield c


def _arrays(p: ConvProblem, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(p.input_shape).astype(np.float32),
            rng.standard_normal(p.weights_shape).astype(np.float32),
            rng.standard_normal(p.k).astype(np.float32))


def test_select_and_batch(client):
    sel = client.select(P, "G77")
    local = convsel.select(P, "G77")
    assert (sel["method"], sel["algorithm"], sel["rule"]) == (local.method, local.algorithm,
                                                               local.rule)
    batch = client.select_batch([P, {**P.to_dict(), "pad": 7}], "cpu")
    assert batch["count"] == 2 and batch["failed"] == 1
    assert batch["results"][1]["error"]["code"] == "invalid_problem"


@pytest.mark.parametrize("multipart", [False, True])
def test_conv2d_numpy_in_numpy_out(client, multipart):
    x, w, b = _arrays(P)
    y = client.conv2d(x, w, b, pad=1, multipart=multipart)
    assert y.dtype == np.float32 and y.shape == P.output_shape
    np.testing.assert_allclose(y, convsel.conv2d(x, w, b, pad=1), rtol=1e-5, atol=1e-5)


def test_conv2d_large_tensors_go_multipart_and_torch_layouts_work(client):
    p = ConvProblem(1, 64, 64, 16, 16, 3, 3, pad=1, layout="NCHW")
    rng = np.random.default_rng(2)
    x = rng.standard_normal(p.input_shape).astype(np.float32)           # 256 KiB: multipart
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)          # OIHW
    y = client.conv2d(x, w, pad=1, layout="NCHW", weights_layout="OIHW")
    np.testing.assert_allclose(y, convsel.conv2d(x, w, pad=1, layout="NCHW",
                                                 weights_layout="OIHW"), rtol=1e-5, atol=1e-4)


def test_plan(client, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx_models import groups_chain

    path = tmp_path / "m.onnx"
    onnx.save(groups_chain(), path)
    answer = client.plan(path, "cpu")
    assert [n["name"] for n in answer["nodes"]] == ["depthwise", "grouped", "dilated"]
    assert client.plan(path.read_bytes())["summary"]["convolutions"] == 3


def test_find_and_tune(client):
    small = ConvProblem(1, 6, 6, 4, 4, 3, 3, pad=1)
    found = client.find(small, budget_s=20, store=True)
    ok = [r for r in found["results"] if r["status"] == "ok"]
    assert ok[0]["rank"] == 1 and found["stored"] is True
    tuned = client.tune(small)
    assert tuned["cached"] is True                    # find stored it
    assert tuned["selection"]["source"] == "tuning-db"


def test_errors_are_the_librarys_exceptions(client, server):
    with pytest.raises(InvalidProblemError) as info:
        client.select({**P.to_dict(), "pad": 9})
    assert info.value.field == "problem.pad" and info.value.status == 422
    assert "smaller than the dilated kernel" in info.value.rule
    with pytest.raises(UnknownTargetError):
        client.select(P, "G99")
    x, w, _ = _arrays(P)
    with pytest.raises(UnsupportedError) as info:
        client.conv2d(x, w, pad=1, algorithm="gemm_1x1")
    assert info.value.code == "unsupported" and "1x1" in str(info.value)
    big = ConvProblem(1, 200, 200, 16, 16, 3, 3, pad=1)
    bx, bw, _ = _arrays(big)
    with pytest.raises(TooLargeError) as info:
        client.conv2d(bx, bw, pad=1)
    assert info.value.status == 413 and info.value.field in ("x", "y")
    with Client(server) as anonymous, pytest.raises(UnauthorizedError) as info:
        anonymous.find(P)
    assert info.value.status == 401
    with pytest.raises(InvalidProblemError) as info:
        client.find(P, budget_s=1e9)
    assert info.value.code == "validation_error"
