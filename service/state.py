"""What the app holds between requests, and the dependency that hands it to routes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Request

from convsel import Rules, TuningDatabaseError
from convsel.rules import default_rules_path
from convsel.tuning import TuningDB, default_target, is_url, open_db
from convsel.verdict import Verdict

from .config import Settings
from .metrics import Metrics
from .npy import TensorLimits
from .pool import ConvPool

ReadyCheck = Callable[[FastAPI], Mapping[str, Any]]

# An absolute host path inside a message ("/home/op/.local/share/convsel/tuning.sqlite"), not
# the path part of a URL; and a URL's user:password.
_HOST_PATH = re.compile(r"(?<![\w.:/~-])/[^\s'\",;:()]+")
_URL_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^@/\s]+@", re.IGNORECASE)
# A PostgreSQL store's location (its URL, password or not) and libpq's naming of its server
# ('server at "10.0.0.5", port 5432'): the host path of a store that lives on a server.
_DATABASE_URL = re.compile(r"\bpostgres(?:ql)?://[^\s'\",;()]*", re.IGNORECASE)
_LIBPQ_SERVER = re.compile(r'(server at )"[^"]*", port \d+')
HIDDEN = "<path>"


@dataclass
class ServiceState:
    """Built by ``create_app``; ``rules``, ``backends`` and ``pool`` are filled by the lifespan.

    ``ready_checks`` maps a component name to a function returning ``{"ok": bool, ...}``
    (``service.app.READY_CHECKS``).
    """

    settings: Settings
    metrics: Metrics
    rules: Rules | None = None
    rules_json: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, Verdict] = field(default_factory=dict)
    describers: dict[str, Callable[[], Any]] = field(default_factory=dict)
    pool: ConvPool | None = None
    ready_checks: dict[str, ReadyCheck] = field(default_factory=dict)
    _probes: _Probes = field(default_factory=lambda: _Probes(), init=False, repr=False)

    @property
    def tensor_limits(self) -> TensorLimits:
        return TensorLimits(self.settings.max_tensor_elements, self.settings.max_tensor_bytes)

    def target(self, given: str | None) -> str:
        """The request's target, or the server's default when it names none (an empty
        name is the library's to refuse, not a request for the default)."""
        return self.settings.default_target if given is None else given

    def loaded_rules(self) -> Rules:
        if self.rules is None:
            raise RuntimeError("rules are not loaded: the app's lifespan has not run")
        return self.rules

    def public(self, value: Any) -> Any:
        """``value`` (text, or a JSON-ready tree) as this server may show it to any caller:
        credentials in URLs always hidden, host paths and database servers (a PostgreSQL
        store's URL, libpq's 'server at "host", port N') hidden unless CONVSEL_SHOW_PATHS."""
        if isinstance(value, str):
            text = _URL_CREDENTIALS.sub(r"\1***@", value)
            return text if self.settings.show_paths else _HOST_PATH.sub(
                HIDDEN, _hide_servers(text))
        if isinstance(value, Mapping):
            return {k: self.public(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.public(v) for v in value]
        return value

    def store(self, *, create: bool = True) -> TuningDB:
        """This server's tuning store, opened; a store that cannot be opened raises
        :class:`TuningDatabaseError` (503) with its location shown as :meth:`public` allows."""
        try:
            return open_db(self.settings.tuning_db, create=create)
        except TuningDatabaseError as exc:
            raise TuningDatabaseError(self.public(str(exc))) from None

    def hide_database(self, value: Any) -> Any:
        """``value`` (a JSON-ready tree) with the tuning database's location replaced by
        ``<path>`` unless CONVSEL_SHOW_PATHS: a measured or predicted answer's trace names it
        ("no model ... in <path>"). Targeted, unlike :meth:`public`: a selection's text holds
        slashes that are not paths ("×/÷ 1.21")."""
        if self.settings.show_paths:
            return value
        return _replace_all(value, self._database_places())

    def _database_places(self) -> tuple[str, ...]:
        # Worked out from the setting, never by opening the database: this runs on every
        # measured answer, and opening waits on the database when it is down.
        configured = self.settings.tuning_db or str(default_target())
        places = {configured, str(Path(configured).expanduser())}
        return tuple(sorted((p for p in places if p and not is_url(p)), key=len, reverse=True))

    def rules_source(self, rules: Rules) -> str:
        """The rules file's path with CONVSEL_SHOW_PATHS, else 'packaged' or 'custom'."""
        if self.settings.show_paths:
            return rules.source
        return "packaged" if rules.source == str(default_rules_path()) else "custom"

    async def readiness(self, app: FastAPI) -> dict[str, dict[str, Any]]:
        """One entry per component; the service is ready when every entry is ``ok``.

        The routers' checks run on worker threads (the tuning database's may wait on a
        server that does not answer), and the answer waits for them ``ready_timeout_s`` at
        most: a check still running then is reported unavailable (only the stores are slow,
        and a store never makes the service unready: answers then come from the rules).
        """
        detail: dict[str, dict[str, Any]] = {"rules": self._rules_detail(),
                                             "backends": self._backends_detail()}
        names = list(self.ready_checks)
        timeout = self.settings.ready_timeout_s
        answers = await asyncio.gather(*(self._probes.answer(name, self.ready_checks[name], app,
                                                             timeout) for name in names))
        for name, answer in zip(names, answers, strict=True):
            detail[name] = self.public(answer)
        return detail

    def _rules_detail(self) -> dict[str, Any]:
        rules = self.rules
        if rules is None:
            return {"ok": False, "reason": "not loaded yet"}
        return {"ok": True, "version": rules.version, "digest": rules.digest,
                "source": self.rules_source(rules)}

    def _backends_detail(self) -> dict[str, Any]:
        if not self.backends:
            return {"ok": False, "reason": "not probed yet"}
        default = self.settings.default_backend
        probed = {name: {"available": v.ok, "reason": v.reason}
                  for name, v in self.backends.items()}
        ok = default in self.backends and self.backends[default].ok
        return {"ok": ok, "default": default, "probed": probed}


class _Probes:
    """Readiness checks on worker threads, one run of each check at a time: a probe that
    finds a check still running (stuck on an unreachable database) waits for that run instead
    of starting another, so frequent probes never pile threads up behind a dead server."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Task[dict[str, Any]]] = {}

    async def answer(self, name: str, check: ReadyCheck, app: FastAPI,
                     timeout: float) -> dict[str, Any]:
        task = self._running.get(name)
        if task is None or task.done():
            task = asyncio.ensure_future(anyio.to_thread.run_sync(_run_check, check, app))
            self._running[name] = task
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            return {"ok": True, "available": False,
                    "reason": f"no answer within {timeout:g} s (CONVSEL_READY_TIMEOUT_S); "
                              "still checking"}


def _run_check(check: ReadyCheck, app: FastAPI) -> dict[str, Any]:
    try:
        return dict(check(app))
    except Exception as exc:  # noqa: BLE001 - a failing check reports, never crashes
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _hide_servers(text: str) -> str:
    return _LIBPQ_SERVER.sub(rf"\1{HIDDEN}", _DATABASE_URL.sub(HIDDEN, text))


def _replace_all(value: Any, places: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for place in places:
            value = value.replace(place, HIDDEN)
        return _hide_servers(value)
    if isinstance(value, Mapping):
        return {k: _replace_all(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_all(v, places) for v in value]
    return value


def state_of(request: Request) -> ServiceState:
    """The app's state, for hot routes: resolving ``StateDep`` costs ~90 us per request."""
    state: ServiceState = request.app.state.convsel
    return state


async def get_state(request: Request) -> ServiceState:
    # async: FastAPI would run a plain def dependency on a worker thread, per request.
    return state_of(request)


StateDep = Annotated[ServiceState, Depends(get_state)]
