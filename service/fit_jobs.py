"""Fits on this server run off the request path: each in a fresh worker process, one at a
time, at most ``MAX_QUEUED_FITS`` waiting. ``POST /v1/fit`` (this server's device) and
``POST /v1/fit/jobs`` (any device class in the store) start one with :func:`start_job` and
answer 202 at once; ``GET /v1/fit/jobs/{id}`` reports it from any replica sharing the store,
since the job lives there (:mod:`convsel.tuning.fleet.jobs`).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from convsel import InvalidProblemError, TuningDatabaseError
from convsel.tuning import open_db, run_fit_job, stop_fit_job, submit_fit_job

from .errors import BusyError, ConflictError
from .state import ServiceState, state_of

CLIENT_HEADER = "x-convsel-client"
MAX_QUEUED_FITS = 4


class FitJobOut(BaseModel):
    id: str
    status: Literal["queued", "running", "done", "failed", "lost"]
    backend: str
    device: dict[str, str]
    requester: str
    submitted: float
    finished: float | None
    result: dict[str, Any] | None


class FitJobStarted(BaseModel):
    job: FitJobOut
    poll: str


class FitQueueFullError(BusyError):
    def __init__(self, queued: int, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, f"{queued} fits are running or queued on this server, the "
                                 f"most it accepts; retry after {retry_after} s")


def requester(request: Request, state: ServiceState) -> str:
    """Who sent it: the token's id (never the token) and the client's own name, if given."""
    parts = []
    token = state.settings.api_token
    if token is not None:
        parts.append("token:" + hashlib.sha256(
            token.get_secret_value().encode()).hexdigest()[:8])
    name = request.headers.get(CLIENT_HEADER, "").strip()
    if name:
        printable = "".join(ch if ch.isprintable() else "?" for ch in name)
        parts.append("client:" + printable[:64])
    if not parts:
        host = request.client.host if request.client else "unknown"
        parts.append(f"anonymous ({host})")
    return " ".join(parts)


_Job = tuple[str | None, str, list[str] | None, int | None]   # store, id, families, newest


class FitRunner:
    """Runs fit jobs one at a time, each in a fresh worker process (spawned, not forked from a
    server holding threads and sockets), at most ``MAX_QUEUED_FITS`` waiting. On shutdown the
    running worker is stopped and every unfinished job of this server is marked failed."""

    def __init__(self) -> None:
        self._queue: queue.Queue[_Job] = queue.Queue(MAX_QUEUED_FITS)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running: tuple[str | None, str, Any] | None = None
        self._stopping = False

    def submit(self, job: _Job) -> None:
        """Queue the job; raises queue.Full when ``MAX_QUEUED_FITS`` wait already."""
        with self._lock:
            self._queue.put_nowait(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="convsel-fit-jobs",
                                                daemon=True)
                self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def _work(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        while not self._stopping:
            try:
                job = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            target, job_id = job[:2]
            process = spawn.Process(target=run_fit_job, args=job, name=f"convsel-fit-{job_id}",
                                    daemon=True)
            # Started under the lock that shutdown() takes: either shutdown finds it started
            # (and stops it) or this thread finds shutdown begun (and starts nothing).
            with self._lock:
                if self._stopping:
                    _give_up(target, job_id)
                    break
                process.start()
                self._running = (target, job_id, process)
            process.join()
            with self._lock:
                self._running = None

    def shutdown(self) -> None:
        """Stop the running worker and mark what did not finish as failed."""
        with self._lock:
            self._stopping = True
            running, self._running = self._running, None
        left = [running[:2]] if running else []
        if running:
            running[2].terminate()
            running[2].join(5)
        while True:
            try:
                left.append(self._queue.get_nowait()[:2])
            except queue.Empty:
                break
        for target, job_id in left:
            _give_up(target, job_id)


def _give_up(target: str | None, job_id: str) -> None:
    try:
        stop_fit_job(open_db(target), job_id, "the server stopped before the fit finished; "
                     "submit it again")
    except TuningDatabaseError:
        pass   # the store is gone too: its jobs with it


RUNNER = FitRunner()


def shutdown() -> None:
    """The app's shutdown (service.app's lifespan): no fit worker outlives its server (an app
    created after it in the same process gets a runner of its own)."""
    global RUNNER
    stopping, RUNNER = RUNNER, FitRunner()
    stopping.shutdown()


async def start_job(request: Request, backend: str, ident: Mapping[str, str], *,
                    families: Sequence[str] | None = None,
                    newest: int | None = None) -> JSONResponse:
    """Record a fit of ``backend`` on ``ident`` in the store and queue it: 202 with the job and
    ``Location``, where to poll. 409 when the store holds too few timings to fit, 503 when the
    queue is full."""
    state = state_of(request)
    if RUNNER.waiting >= MAX_QUEUED_FITS:
        raise FitQueueFullError(RUNNER.waiting, state.settings.retry_after_seconds)
    job = await anyio.to_thread.run_sync(_submit, state, backend, ident,
                                         requester(request, state))
    try:
        RUNNER.submit((state.settings.tuning_db, job["id"],
                       None if families is None else list(families), newest))
    except queue.Full:
        await anyio.to_thread.run_sync(_stop, state, job["id"], "the server's queue of fits "
                                       "was full")
        raise FitQueueFullError(RUNNER.waiting, state.settings.retry_after_seconds) from None
    location = f"/v1/fit/jobs/{job['id']}"
    return JSONResponse({"job": state.public(job), "poll": location}, status_code=202,
                        headers={"Location": location})


def _submit(state: ServiceState, backend: str, ident: Mapping[str, str],
            who: str) -> dict[str, Any]:
    try:
        return submit_fit_job(state.store(), backend, ident, who)
    except InvalidProblemError as exc:
        if exc.field != "entries":
            raise
        # Too few timings in this server's store: its state, not the request, is at fault
        # (and no schema could say so): 409, until more are tuned or uploaded.
        raise ConflictError(exc.field, exc.value, exc.rule, str(exc)) from None


def _stop(state: ServiceState, job_id: str, why: str) -> None:
    stop_fit_job(state.store(), job_id, why)
