"""The system layer: timings and fitted models measured on known devices, shipped inside the
package as read-only data beneath the user's tuning store (MIOpen's system find-db beneath its
user db; TVM's TopHub logs).

A fresh install answers the "measured" and "predicted" policies for a shipped device (named by
``device=``, e.g. ``"NVIDIA H100 80GB HBM3"`` with ``backend="opencl"``) without any tuning,
and the answer says it came from here. The user's store is always asked first: its entries and
models win over shipped ones. Shipped data is keyed like the store (problem, backend, device
identity, convsel and implementations versions), so it is used only by the convsel that built
it; ``benchmarks/build_system_layer.py`` regenerates it (see ``convsel/data/system/README.md``).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from .._version import __version__
from ..problem import ConvProblem
from .entry import DEVICE_FIELDS, IMPLEMENTATIONS_VERSION, TuningEntry

FORMAT = "convsel-system-layer"
FILE = "layer.json.gz"
LOCATION = "convsel's shipped system layer"
MODEL_FIELDS = ("backend", "vendor", "device", "driver")
_CURRENT = (__version__, IMPLEMENTATIONS_VERSION)

ClassKey = tuple[str, ...]     # backend, vendor, name, driver


@dataclass(frozen=True)
class Layer:
    """What the package ships: entries per device class and versions, fitted models per
    device class and versions, and how it was built."""

    entries: Mapping[tuple[str, ...], Mapping[ConvProblem, TuningEntry]] = field(
        default_factory=dict)
    models: Mapping[tuple[str, ...], Mapping[str, Any]] = field(default_factory=dict)
    built: Mapping[str, Any] = field(default_factory=dict)
    problem: str = ""     # why the data could not be read ("" when it could, or is absent)


def read(document: Any) -> Layer:
    """The layer a built document holds (see ``benchmarks/build_system_layer.py``)."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"not a convsel system layer (expected \"format\": \"{FORMAT}\")")
    entries: dict[tuple[str, ...], dict[ConvProblem, TuningEntry]] = {}
    for raw in document.get("entries") or []:
        entry = TuningEntry.from_dict(raw)
        key = (entry.backend, *(entry.device[k] for k in DEVICE_FIELDS),
               entry.convsel_version, entry.implementations_version)
        entries.setdefault(key, {})[entry.problem] = entry
    models = {}
    for record in document.get("models") or []:
        key = (*(str(record[k]) for k in MODEL_FIELDS), str(record["convsel_version"]),
               str(record["implementations_version"]))
        models[key] = {"family": record["family"], "model": record["model"],
                       "meta": {**record["meta"], "layer": "system"},
                       "created": float(record["created"])}
    built = {k: v for k, v in document.items() if k not in ("entries", "models")}
    return Layer(entries, models, built)


@lru_cache(maxsize=1)
def layer() -> Layer:
    """The shipped layer, read once per process; empty (with ``problem`` saying why) when the
    package carries none or it cannot be read: the system layer never stops an answer."""
    source = resources.files("convsel").joinpath("data", "system", FILE)
    try:
        with source.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
            return read(json.load(text))
    except FileNotFoundError:
        return Layer(problem=f"the package carries no {FILE}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Layer(problem=f"the shipped {FILE} cannot be read: {exc}")


def lookup(problem: ConvProblem, backend: str, ident: Mapping[str, str]) -> TuningEntry | None:
    """The shipped entry of ``problem`` on ``backend`` and the device ``ident``, measured by
    this convsel and these implementations; None if there is none."""
    return layer().entries.get(_entry_key(backend, ident, *_CURRENT), {}).get(problem)


def entries(backend: str, ident: Mapping[str, str]) -> list[TuningEntry]:
    """Every shipped entry of ``backend`` on ``ident`` that this convsel uses."""
    return list(layer().entries.get(_entry_key(backend, ident, *_CURRENT), {}).values())


def load_model(key: Mapping[str, str]) -> dict[str, Any] | None:
    """The shipped model for a model key (backend, vendor, device, driver) made by this convsel
    and these implementations, as :meth:`TuningDB.load_model` returns one (its meta says
    ``"layer": "system"``); None if there is none."""
    found = layer().models.get((*(str(key[k]) for k in MODEL_FIELDS), *_CURRENT))
    return dict(found) if found is not None else None


def find_class(backend: str, name: str) -> dict[str, str] | None:
    """The identity (vendor, name, driver) of the shipped device class called ``name`` on
    ``backend`` (the one with the most current entries), or None."""
    known = [(len(found), key) for key, found in layer().entries.items()
             if key[0] == backend and key[2] == name and key[4:] == _CURRENT]
    known += [(0, key) for key in layer().models
              if key[0] == backend and key[2] == name and key[4:] == _CURRENT]
    if not known:
        return None
    _, best = max(known)
    return dict(zip(DEVICE_FIELDS, best[1:4], strict=True))


def classes() -> list[dict[str, Any]]:
    """Every shipped device class: identity, entries (this convsel's and others'), shapes,
    and its model's identity and status."""
    layer_ = layer()
    found: dict[ClassKey, dict[str, Any]] = {}
    for key, by_problem in layer_.entries.items():
        item = found.setdefault(key[:4], _blank(key[:4]))
        current = key[4:] == _CURRENT
        item["entries"]["current" if current else "other_versions"] += len(by_problem)
        if current:
            item["shapes"] += len(by_problem)
    for key, record in layer_.models.items():
        item = found.setdefault(key[:4], _blank(key[:4]))
        meta = record["meta"]
        item["model"] = {"family": record["family"], "id": meta.get("id"),
                         "created": record["created"],
                         "training_problems": meta.get("training_problems"),
                         "status": "in use" if key[4:] == _CURRENT else "other version"}
    return [found[k] for k in sorted(found)]


def _blank(key: ClassKey) -> dict[str, Any]:
    backend, vendor, name, driver = key[:4]
    return {"layer": "system", "backend": backend, "vendor": vendor, "name": name,
            "driver": driver, "entries": {"current": 0, "other_versions": 0}, "shapes": 0,
            "uploads": None, "model": None}


def _entry_key(backend: str, ident: Mapping[str, str], cv: str, iv: str) -> tuple[str, ...]:
    return (backend, *(str(ident[k]) for k in DEVICE_FIELDS), cv, iv)


__all__ = ["FORMAT", "LOCATION", "Layer", "classes", "entries", "find_class", "layer",
           "load_model", "lookup", "read"]
