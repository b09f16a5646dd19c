"""What one write transaction changed, named the way readers cache: the NOTIFY payload.

A reader keeps the measured policy's entries per device and its answers per problem
(:mod:`convsel.tuning.cache`), so a notice that names the changed *entry* (device and problem)
lets every other cached answer stand. :class:`Written` watches the statements of one
transaction and says which entries and which devices' models they wrote; :func:`payload`
turns that into the notice's text and :func:`parse` back.

Whatever it cannot name is "everything": an ``UPDATE`` or ``DELETE`` of entries or models
(their rows are chosen by a ``WHERE``, not listed), a statement it does not recognise, a
payload too long for PostgreSQL (under 8000 bytes) even at device level, and an empty or
unreadable payload (a convsel from before payloads sends a bare ``NOTIFY``). Writes to other
tables (uploads, fit jobs) name nothing; the notice still counts, for readers that did not say
what they depend on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# A device's rows of one table: (table, backend, vendor, device, driver).
Device = tuple[str, str, str, str, str]
PAYLOAD_LIMIT = 7999      # bytes; PostgreSQL refuses a payload of 8000 or more
EVERYTHING = "*"
KEYED_TABLES = ("entries", "models")    # what cached reads depend on, row by row
_DEVICE_COLUMNS = ("backend", "vendor", "device", "driver")
_WRITE = re.compile(r"\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)
_INSERT_COLUMNS = re.compile(r"\s*INSERT\s+INTO\s+\w+\s*\(([^)]*)\)", re.IGNORECASE)


@dataclass
class Change:
    """What a notice (or this process's own commit) says changed.

    ``entries``: per device, the problem keys written; ``devices``: devices all of whose rows
    (of that table: entries, or the device's model) may have changed; ``everything``: the
    whole store; ``writer``: the process that wrote (its own notice is not counted twice).
    """

    entries: dict[Device, set[str]] = field(default_factory=dict)
    devices: set[Device] = field(default_factory=set)
    everything: bool = False
    writer: str = ""


class Written:
    """The :class:`Change` of one transaction, from the statements it runs."""

    def __init__(self) -> None:
        self.change = Change()

    def note(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``sql`` ran with each of ``rows`` (its arguments)."""
        if self.change.everything or sql.lstrip()[:6].upper() == "SELECT":
            return      # reads and advisory locks change nothing
        found = _WRITE.match(sql)
        if found is None:
            self.change.everything = True      # not recognised: say so, never guess
            return
        table = found.group(2).lower()
        if table not in KEYED_TABLES:
            return
        columns = _INSERT_COLUMNS.match(sql)
        names = [c.strip().lower() for c in columns.group(1).split(",")] if columns else []
        wanted = [*_DEVICE_COLUMNS, *(("problem",) if table == "entries" else ())]
        if not columns or not set(wanted) <= set(names):
            self.change.everything = True      # rows chosen by WHERE: not named here
            return
        at = [names.index(c) for c in wanted]
        for row in rows:
            key = tuple(str(row[i]) for i in at)
            device: Device = (table, *key[:4])   # type: ignore[assignment]
            if table == "entries":
                self.change.entries.setdefault(device, set()).add(key[4])
            else:
                self.change.devices.add(device)


def payload(change: Change) -> str:
    """The notice's text: each entry named, else (too long) each device, else everything."""
    head: dict[str, Any] = {"w": change.writer}
    if not change.everything:
        devices = sorted(change.devices)
        named = [[*d, sorted(p)] for d, p in sorted(change.entries.items())]
        for body in ({"e": named, "d": devices}, {"d": sorted({*devices, *change.entries})}):
            text = json.dumps({**head, **body}, separators=(",", ":"))
            if len(text.encode()) <= PAYLOAD_LIMIT:
                return text
    return json.dumps({**head, EVERYTHING: 1}, separators=(",", ":"))


def parse(text: str) -> Change:
    """The :class:`Change` a notice names; everything when it names nothing readable."""
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return Change(everything=True)
    change = Change(writer=str(raw.get("w", "")))
    if EVERYTHING in raw or ("e" not in raw and "d" not in raw):
        change.everything = True
        return change
    try:
        for *device, problems in raw.get("e", []):
            change.entries[_device(device)] = {str(p) for p in problems}
        change.devices = {_device(d) for d in raw.get("d", [])}
    except (ValueError, TypeError):
        return Change(everything=True, writer=change.writer)
    return change


def _device(parts: Sequence[Any]) -> Device:
    table, backend, vendor, device, driver = (str(p) for p in parts)
    if table not in KEYED_TABLES:
        raise ValueError(f"table {table!r}")
    return (table, backend, vendor, device, driver)
