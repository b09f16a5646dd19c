"""convsel.client.Client and AsyncClient against a REAL server: `convsel serve` on a free
loopback port. Answers are the library's types (issue 25, item 18)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time

import numpy as np
import pytest
from learn_support import entry_for, overhead_seconds, training_problems
from service_support import convsel_command, free_port, wait_ready

import convsel
from convsel import ConvProblem
from convsel.client import AsyncClient, BusyError, Client, TooLargeError, UnauthorizedError
from convsel.errors import InvalidProblemError, UnknownTargetError, UnsupportedError
from convsel.finder import FindResult
from convsel.selection import Selection
from convsel.tuning import TuningDB, device_identity

TOKEN = "client-test-token"
P = ConvProblem(1, 12, 12, 8, 16, 3, 3, pad=1)


@pytest.fixture(scope="module")
def server_db(tmp_path_factory):
    return tmp_path_factory.mktemp("client") / "tuning.sqlite"


@pytest.fixture(scope="module")
def server(server_db):
    port = free_port()
    where, db = server_db.parent, server_db
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


@pytest.mark.parametrize("target", ["G77", "cpu", "Mali-G78AE r0p1"])
def test_select_is_the_librarys_selection(client, target):
    sel = client.select(P, target)
    assert isinstance(sel, Selection)
    assert sel == convsel.select(P, target)          # every field: trace, candidates, params
    assert sel.explain() == convsel.select(P, target).explain()


def test_select_over_a_backend_list_names_the_backend(client):
    # the server's empty database: the rules' answer on the first backend that supports it
    sel = client.select(P, "cpu", policy="measured", backend="opencl,numpy")
    assert (sel.backend, sel.rule) == ("opencl", "across.first-supported")
    assert sel.algorithm == convsel.select(P, "cpu").algorithm


def test_select_batch_gives_selections_and_errors_in_order(client):
    batch = client.select_batch([P, {**P.to_dict(), "pad": 7}], "cpu")
    assert batch[0] == convsel.select(P, "cpu")
    assert isinstance(batch[1], InvalidProblemError) and batch[1].code == "invalid_problem"


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
    assert isinstance(found, FindResult) and found.problem == small and found.stored
    ok = [r for r in found.results if r.status == "ok"]
    assert ok[0].rank == 1 and found.best == ok[0] and ok[0].median_s > 0
    assert found.winner in (None, ok[0].label) and "candidate" in found.table()
    tuned = client.tune(small)
    assert tuned["cached"] is True                    # find stored it
    assert isinstance(tuned["selection"], Selection)
    assert tuned["selection"].source == "tuning-db"


def test_fit_runs_in_a_worker_on_the_server_and_is_polled(client, server, server_db):
    # timings of the server's own device (this machine's numpy) the roofline family can learn
    TuningDB(server_db).record_many([entry_for(p, device_identity("numpy"), overhead_seconds)
                                     for p in training_problems()])
    job = client.fit(families=["roofline"], wait_s=120, poll_s=0.2)
    assert job["status"] == "done", job
    assert job["result"]["family"] == "roofline" and job["result"]["in_use"], job
    assert job["requester"].startswith("token:")
    with Client(server) as anonymous, pytest.raises(UnauthorizedError):
        anonymous.fit(wait_s=0)


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


def test_the_async_client_answers_as_the_sync_one(server):
    x, w, b = _arrays(P)

    async def calls():
        async with AsyncClient(server, token=TOKEN) as c:
            sel, y, found = await asyncio.gather(
                c.select(P, "G77"), c.conv2d(x, w, b, pad=1),
                c.find(ConvProblem(1, 6, 6, 4, 4, 3, 3, pad=1), budget_s=20))
            with pytest.raises(UnknownTargetError):
                await c.select(P, "G99")
            return sel, y, found, await c.health()

    sel, y, found, health = asyncio.run(calls())
    assert sel == convsel.select(P, "G77") and isinstance(found, FindResult)
    np.testing.assert_allclose(y, convsel.conv2d(x, w, b, pad=1), rtol=1e-5, atol=1e-5)
    assert health["status"] == "ok"


# -- 503 busy: Retry-After honoured, bounded ------------------------------------------------
BUSY = ConvProblem(1, 56, 56, 64, 64, 3, 3, pad=1)   # more to time than a 2 s budget allows
TINY = ConvProblem(1, 4, 4, 1, 1, 1, 1)               # timed in moments


@pytest.fixture
def busy_server(server):
    """The server's one tuning slot held for about 2 s by a tuning in another thread."""
    done = threading.Event()

    def hold():   # retries: a probe below may hold the slot for a moment
        with Client(server, token=TOKEN, retries=10) as c:
            c.tune(BUSY, budget_s=2, retune=True)
        done.set()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    with Client(server, token=TOKEN, retries=0) as probe:
        while time.monotonic() < deadline:   # until the slot is taken
            try:
                probe.tune(TINY, budget_s=0.01, retune=True)
            except BusyError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the holding tuning never took the slot")
    yield server
    thread.join(timeout=60)
    assert done.is_set()


def test_busy_without_retries_is_a_busy_error_with_retry_after(busy_server):
    with Client(busy_server, token=TOKEN, retries=0) as c, pytest.raises(BusyError) as info:
        c.tune(P, budget_s=1)
    assert info.value.status == 503 and info.value.retry_after >= 1


def test_a_retry_after_longer_than_the_bound_is_not_waited_for(busy_server):
    started = time.monotonic()
    with Client(busy_server, token=TOKEN, retries=5, max_retry_wait_s=0.5) as c, \
            pytest.raises(BusyError):
        c.tune(P, budget_s=1)
    assert time.monotonic() - started < 0.9


def test_retries_wait_what_retry_after_says_then_succeed(busy_server):
    started = time.monotonic()
    with Client(busy_server, token=TOKEN, retries=5, max_retry_wait_s=10) as c:
        tuned = c.tune(P, budget_s=1)
    assert time.monotonic() - started >= 1.0        # it waited at least one Retry-After
    assert isinstance(tuned["selection"], Selection)


def test_the_async_client_retries_too(busy_server):
    async def call():
        async with AsyncClient(busy_server, token=TOKEN, retries=5) as c:
            return await c.tune(P, budget_s=1)

    assert isinstance(asyncio.run(call())["selection"], Selection)
