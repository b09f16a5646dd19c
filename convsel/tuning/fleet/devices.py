"""The device classes a store knows, and a device named by its class.

A *device class* is one device identity on one backend: (backend, vendor, name, driver), the
key that entries and models are stored under. Devices that upload (:mod:`.uploads`) or tune
into a shared store each add their class; :func:`device_classes` lists them with what the
store holds for each (``GET /v1/devices``), and :func:`resolve` turns a class's name
(``"NVIDIA H100 80GB HBM3"``) into its identity, so that the policies answer for a device that
is not this machine (``device=`` of ``choose``, ``/v1/select``, ``/v1/plan``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..._version import __version__
from .. import system
from ..db import TuningDB
from ..entry import DEVICE_FIELDS, IMPLEMENTATIONS_VERSION
from .jobs import latest_jobs

CLASS = ("backend", "vendor", "device", "driver")
RESOLVE_TTL_S = 2.0     # a class uploaded to one replica is known to another within this long

_resolved: dict[tuple[str, str, str], tuple[float, dict[str, str] | None]] = {}
_lock = threading.Lock()


def resolve(backend: str, name: str, db: TuningDB | None) -> dict[str, str] | None:
    """The identity (vendor, name, driver) of the device class called ``name`` on
    ``backend``: in the store ``db`` first (the class with the most entries of this convsel,
    then of any version, then one with only a model), else in the shipped system layer;
    None when neither knows it. Kept for :data:`RESOLVE_TTL_S` per store and name."""
    key = (db.location if db is not None else "", backend, name)
    now = time.monotonic()
    with _lock:
        hit = _resolved.get(key)
    if hit is not None and now - hit[0] < RESOLVE_TTL_S:
        return dict(hit[1]) if hit[1] is not None else None
    found = (stored_class(db, backend, name) if db is not None else None) \
        or system.find_class(backend, name)
    with _lock:
        if len(_resolved) > 4096:
            _resolved.clear()
        _resolved[key] = (now, found)
    return dict(found) if found is not None else None


def stored_class(db: TuningDB, backend: str, name: str) -> dict[str, str] | None:
    """The identity of the device class called ``name`` on ``backend`` in the store ``db``
    only (see :func:`resolve`), or None."""
    rows = db.rows("SELECT vendor, driver, SUM(CASE WHEN convsel_version=? AND "
                   "implementations_version=? THEN 1 ELSE 0 END), COUNT(*) FROM entries "
                   "WHERE backend=? AND device=? GROUP BY vendor, driver",
                   (__version__, IMPLEMENTATIONS_VERSION, backend, name))
    if not rows and db.schema_version >= 2:
        rows = [(v, d, 0, 0) for v, d in db.rows(
            "SELECT vendor, driver FROM models WHERE backend=? AND device=?", (backend, name))]
    if not rows:
        return None
    vendor, driver, _, _ = max(rows, key=lambda r: (int(r[2] or 0), int(r[3] or 0), r[1]))
    return {"vendor": str(vendor), "name": name, "driver": str(driver)}


def device_classes(db: TuningDB | None, *, shipped: bool = True) -> list[dict[str, Any]]:
    """Every device class of the store ``db`` (and, with ``shipped``, of the system layer):
    its identity and ``layer`` ("user": the store, "system": shipped), its entries (this
    convsel's, and other versions' kept unused), distinct shapes, uploads (how many, by how
    many uploaders, the last, how many were flagged), its model and that model's status, and
    the latest fit job."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    if db is not None:
        _add_entries(db, found)
        _add_uploads(db, found)
        _add_models(db, found)
        for key, job in latest_jobs(db).items():
            _item(found, key)["fit_job"] = job
    out = [found[k] for k in sorted(found)]
    return out + (system.classes() if shipped else [])


def _item(found: dict[tuple[str, ...], dict[str, Any]], key: tuple[str, ...]) -> dict[str, Any]:
    if key not in found:
        backend, vendor, name, driver = key
        found[key] = {"layer": "user", "backend": backend, "vendor": vendor, "name": name,
                      "driver": driver, "entries": {"current": 0, "other_versions": 0},
                      "shapes": 0, "uploads": {"count": 0, "uploaders": 0, "flagged": 0,
                                               "last": None},
                      "model": None, "fit_job": None}
    return found[key]


def _add_entries(db: TuningDB, found: dict[tuple[str, ...], dict[str, Any]]) -> None:
    rows = db.rows("SELECT backend, vendor, device, driver, convsel_version, "
                   "implementations_version, COUNT(*), COUNT(DISTINCT problem) FROM entries "
                   "GROUP BY backend, vendor, device, driver, convsel_version, "
                   "implementations_version")
    for backend, vendor, name, driver, cv, iv, count, shapes in rows:
        item = _item(found, (backend, vendor, name, driver))
        current = (cv, iv) == (__version__, IMPLEMENTATIONS_VERSION)
        item["entries"]["current" if current else "other_versions"] += int(count)
        if current:
            item["shapes"] += int(shapes)


def _add_uploads(db: TuningDB, found: dict[tuple[str, ...], dict[str, Any]]) -> None:
    if db.schema_version < 3:
        return
    rows = db.rows("SELECT backend, vendor, device, driver, COUNT(*), COUNT(DISTINCT "
                   "uploader), SUM(CASE WHEN status='flagged' THEN 1 ELSE 0 END), "
                   "MAX(received) FROM uploads GROUP BY backend, vendor, device, driver")
    for backend, vendor, name, driver, count, uploaders, flagged, last in rows:
        _item(found, (backend, vendor, name, driver))["uploads"] = {
            "count": int(count), "uploaders": int(uploaders), "flagged": int(flagged or 0),
            "last": float(last) if last is not None else None}


def _add_models(db: TuningDB, found: dict[tuple[str, ...], dict[str, Any]]) -> None:
    for model in db.models():
        key = tuple(str(model[k]) for k in CLASS)
        current = (model["convsel_version"], model["implementations_version"]) == (
            __version__, IMPLEMENTATIONS_VERSION)
        item = _item(found, key)
        if item["model"] is not None and item["model"]["status"] == "in use" and not current:
            continue   # the model in use is the one to show
        meta = dict(model.get("meta") or {})
        item["model"] = {"family": model["family"], "id": meta.get("id"),
                         "created": model["created"],
                         "training_problems": meta.get("training_problems"),
                         "status": model_status(meta, current)}


def model_status(meta: dict[str, Any], current: bool) -> str:
    """"in use", "rejected" (it did not beat ACL's rules when fitted) or "other version"."""
    if not current:
        return "other version"
    return "rejected" if meta.get("accepted") is False else "in use"


__all__ = ["CLASS", "DEVICE_FIELDS", "device_classes", "model_status", "resolve",
           "stored_class"]
