"""What this process has been told changed in one PostgreSQL store, so a cached value can ask
"did anything I depend on change since I was read?" instead of being dropped at every commit.

Each :class:`~convsel.tuning.store.changes.Change` (a notice, or this process's own commit)
takes the next number of a sequence; the log remembers, per device and per entry, the last
number that touched it. A value read at :class:`View` ``v`` depends on *scopes*:

- ``("entries", backend, vendor, device, driver, problem)``: one entry;
- ``("entries", backend, vendor, device, driver)``: any entry of the device;
- ``("models", backend, vendor, device, driver)``: the device's model;
- ``None`` (not a scope: the whole store): any change at all, writes to other tables included.

A change of everything, a lost connection, and a log grown past :data:`MAX_ITEMS` start a new
*epoch* instead: every value read before it is read again. The current :class:`View` is
published as one attribute, so the common case (nothing changed) costs no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from .changes import Change, Device

Scope = tuple[str, ...]
MAX_ITEMS = 65536    # entries remembered per log: a new epoch beyond (one re-read of all)


@dataclass(frozen=True)
class View:
    """A point of a log's sequence: what a value was read under."""

    epoch: Hashable
    seq: int
    log: ChangeLog = field(compare=False, repr=False)


class ChangeLog:
    def __init__(self, name: Hashable):
        self._name = name            # names the process and listener: no other log matches
        self._lock = threading.Lock()
        self._generation = 0
        self._seq = 0
        self._device_seq: dict[Device, int] = {}    # the last change to anything of a device
        self._whole_seq: dict[Device, int] = {}     # ... to all of it at once (not named)
        self._item_seq: dict[Device, dict[str, int]] = {}
        self._items = 0
        self.view = View((name, 0), 0, self)

    def apply(self, change: Change) -> None:
        """Count ``change``."""
        with self._lock:
            named = sum(len(p) for p in change.entries.values())
            if change.everything or self._items + named > MAX_ITEMS:
                self._new_epoch()
                return
            self._seq += 1
            seq = self._seq
            for device in change.devices:
                self._whole_seq[device] = self._device_seq[device] = seq
            for device, problems in change.entries.items():
                self._device_seq[device] = seq
                items = self._item_seq.setdefault(device, {})
                before = len(items)
                items.update(dict.fromkeys(problems, seq))
                self._items += len(items) - before
            self.view = View(self.view.epoch, seq, self)

    def new_epoch(self) -> None:
        """Forget what was counted: every value read before now is read again (notices were
        lost, or a change named everything)."""
        with self._lock:
            self._new_epoch()

    def _new_epoch(self) -> None:
        self._generation += 1
        self._device_seq.clear()
        self._whole_seq.clear()
        self._item_seq.clear()
        self._items = 0
        self.view = View((self._name, self._generation), self._seq, self)

    def changed(self, since: View, scopes: Iterable[Scope] | None) -> bool:
        """Whether anything of ``scopes`` (None: anything at all) changed after ``since``."""
        with self._lock:
            if since.epoch != self.view.epoch:
                return True
            if scopes is None:
                return self._seq > since.seq
            return any(self._last(scope) > since.seq for scope in scopes)

    def changed_items(self, since: View, scope: Scope) -> set[str] | None:
        """The problems of the entries of ``scope`` (a device's) changed after ``since``; None
        when they may all have (a change not named row by row, or a new epoch)."""
        device: Device = scope[:5]     # type: ignore[assignment]
        with self._lock:
            if since.epoch != self.view.epoch or self._whole_seq.get(device, 0) > since.seq:
                return None
            if self._device_seq.get(device, 0) <= since.seq:
                return set()
            return {p for p, seq in self._item_seq.get(device, {}).items() if seq > since.seq}

    def _last(self, scope: Scope) -> int:
        device: Device = scope[:5]     # type: ignore[assignment]
        if len(scope) == 5:
            return self._device_seq.get(device, 0)
        named = self._item_seq.get(device)
        return max(self._whole_seq.get(device, 0), named.get(scope[5], 0) if named else 0)
