"""Sending measured entries to a convsel server (``POST /v1/tuning/entries``), for
``convsel tune --remote`` and ``convsel db push``.

The local tuning database is the journal: every entry is recorded there first and sent
after, so nothing measured is lost when the server cannot be reached. Sending is idempotent
(the server stores one measurement once), so a run that stopped halfway resumes by sending
again what it holds: the server answers "nothing changed" for what it already had.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConvselError, InvalidProblemError
from ..tuning.entry import TuningEntry

STATUSES = ("accepted", "merged", "flagged", "rejected")
RETRY_AFTER_S = 30.0


def add_remote_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--remote URL`` (or URL, for push), ``--token``, ``--client``."""
    if not required:
        parser.add_argument("--remote", default=None, metavar="URL",
                            help="also upload each entry to this convsel server as it is "
                                 "measured (POST /v1/tuning/entries); entries tuned before "
                                 "are sent too, so an interrupted run resumes")
    parser.add_argument("--token", default=None, metavar="T",
                        help="the server's API token (default: $CONVSEL_API_TOKEN)")
    parser.add_argument("--client", default=None, metavar="NAME",
                        help="this device's name in the server's record of who uploaded what")


class Uploader:
    """Entries to send, in batches; what the server answered, counted."""

    def __init__(self, url: str, token: str | None = None, client: str | None = None, *,
                 batch: int = 200, partial: bool = False, timeout: float = 60.0) -> None:
        from ..client import Client  # httpx: the client extra

        if batch < 1:
            raise InvalidProblemError("batch", batch, "at least 1 entry per upload")
        self.url, self.client, self.batch, self.partial = url, client, batch, partial
        self._http = Client(url, token, timeout=timeout)
        self.pending: list[TuningEntry] = []
        self.counts = dict.fromkeys(STATUSES, 0)
        self.refused: list[str] = []
        self.unreachable = ""
        self._next_try = 0.0

    def close(self) -> None:
        self._http.close()

    def send(self, entries: Sequence[TuningEntry]) -> bool:
        """Queue ``entries`` and send everything queued; False when the server could not be
        reached (the entries stay queued; after a failure the next try waits
        :data:`RETRY_AFTER_S`, so an unreachable server does not slow the tuning)."""
        self.pending.extend(entries)
        if self.unreachable and time.monotonic() < self._next_try:
            return False
        return self.flush()

    def flush(self) -> bool:
        import httpx

        while self.pending:
            chunk = self.pending[:self.batch]
            try:
                report = self._http.upload(chunk, client=self.client, partial=self.partial)
            except InvalidProblemError as exc:
                # refused whole (an entry failed a check): those entries will not pass later
                self.counts["rejected"] += len(chunk)
                self.refused.append(f"{len(chunk)} entries refused: {exc}")
                for item in (getattr(exc, "errors", None) or [])[:5]:
                    self.refused.append(f"  entry {item['loc'][-1]}: {item['msg']}")
            except (ConvselError, OSError, httpx.TransportError) as exc:
                self.unreachable = f"{type(exc).__name__}: {exc}"
                self._next_try = time.monotonic() + RETRY_AFTER_S
                return False
            else:
                for status in STATUSES:
                    self.counts[status] += int(report.get(status, 0))
                self.refused += [f"entry {o['index']}: {o['reason']}"
                                 for o in report.get("entries", [])
                                 if o.get("status") == "rejected"][:5]
            del self.pending[:len(chunk)]
        self.unreachable = ""
        return True

    def summary(self) -> str:
        sent = ", ".join(f"{self.counts[s]} {s}" for s in STATUSES)
        text = f"sent to {self.url}: {sent}"
        if self.pending:
            text += (f"; {len(self.pending)} not sent ({self.unreachable}): they are in the "
                     "local database; run the same command again to send them")
        return text


def report(uploader: Uploader, out: Any = None) -> None:
    """Print the uploader's summary and the first refusals."""
    stream = out or sys.stdout
    print(uploader.summary(), file=stream)
    for line in uploader.refused[:10]:
        print(f"  {line}", file=stream)


def start_remote(args: argparse.Namespace, db: Any, done: Sequence[Any],
                 device: Any) -> Uploader | None:
    """For ``tune --remote``: an uploader, having sent the entries of the layers this device
    tuned before (``done``): a run that stopped resumes where it stopped. None without
    ``--remote``."""
    if not getattr(args, "remote", None):
        return None
    from ..tuning.identity import device_identity

    uploader = Uploader(args.remote, args.token, args.client)
    ident = device_identity(args.backend, device)
    before = [e for e in (db.lookup(layer.problem, args.backend, ident) for layer in done)
              if e is not None]
    if before and not uploader.send(before):
        print(f"warning: {args.remote} cannot be reached ({uploader.unreachable}); tuning "
              "goes on locally, and the entries are sent when it can be", file=sys.stderr)
    return uploader


def finish_remote(uploader: Uploader | None) -> None:
    """Send what is left and say what the server made of it all."""
    if uploader is None:
        return
    try:
        uploader.flush()
    finally:
        uploader.close()
    report(uploader)
