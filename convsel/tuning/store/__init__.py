"""Where the tuning database lives: an SQLite file (the embedded default) or a PostgreSQL
database shared by several replicas. Both engines hold one schema (:mod:`.schema`) and offer
the same two operations to :class:`convsel.tuning.db.TuningDB`: read rows, and run writes in
one transaction. SQL is written once, with ``?`` placeholders."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(target, str) and target.strip().lower().startswith(URL_SCHEMES)


class Transaction(Protocol):
    def execute(self, sql: str, args: Sequence[Any] = ()) -> int: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


class Engine(Protocol):
    """One open store. ``location`` never holds a password."""

    name: str
    location: str
    read_only_reason: str
    schema_version: int

    @property
    def writable(self) -> bool: ...

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def transaction(self) -> AbstractContextManager[Transaction]: ...

    def refresh(self) -> None:
        """Look again at a store that was found read-only (it may be writable again)."""

    def check_intact(self) -> None:
        """Raise TuningDatabaseError when the store's own check finds it damaged."""

    def close(self) -> None: ...
