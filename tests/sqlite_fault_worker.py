"""Real file-system faults under a tuning database, for tests/tuning/test_tuning_db_faults.py.

    unshare --user --map-root-user --mount python tests/sqlite_fault_worker.py SCENARIO DIR

runs in a private mount namespace (so an unprivileged user may mount, and nothing leaks to the
host), mounts a small tmpfs on DIR, opens a tuning database there, breaks the file system
under the open database and prints, as one JSON object, what each call did afterwards:
``{step: {"ok": true, "value": ...} | {"ok": false, "error": "..."}}``.

    remount-ro   mount -o remount,ro under the open database, then remount,rw again
    full         fill the disk to the last byte, then free it again
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from store_worker import DEVICE, SMALL, entry

from convsel.tuning.db import open_db


def attempt(work: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"ok": True, "value": work()}
    except Exception as exc:   # the test judges the error's type and text
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def found(db: Any) -> bool:
    return db.lookup(SMALL, "numpy", DEVICE) is not None


def remount_ro(directory: str) -> dict[str, Any]:
    db = open_db(os.path.join(directory, "tuning.sqlite"))
    db.record(entry(0))
    subprocess.run(["mount", "-o", "remount,ro", directory], check=True)
    steps = {"lookup_ro": attempt(lambda: found(db)),
             "status_ro": attempt(lambda: {k: db.status()[k] for k in ("writable",
                                                                       "read_only_reason")}),
             "record_ro": attempt(lambda: db.record(entry(1)))}
    subprocess.run(["mount", "-o", "remount,rw", directory], check=True)
    steps["record_rw"] = attempt(lambda: db.record(entry(2)))
    steps["status_rw"] = attempt(lambda: db.status()["writable"])
    steps["entries_rw"] = attempt(lambda: len(db.entries()))
    return steps


def full(directory: str) -> dict[str, Any]:
    db = open_db(os.path.join(directory, "tuning.sqlite"))
    db.record(entry(0))
    filler = os.path.join(directory, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass   # ENOSPC: the disk is full to the last page
    finally:
        os.close(fd)
    steps = {"record_full": attempt(lambda: db.record(entry(1))),
             "lookup_full": attempt(lambda: found(db))}
    os.remove(filler)
    steps["record_freed"] = attempt(lambda: db.record(entry(2)))
    steps["entries_freed"] = attempt(lambda: len(db.entries()))
    return steps


def main(scenario: str, directory: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", directory], check=True)
    run = {"remount-ro": remount_ro, "full": full}[scenario]
    print(json.dumps(run(directory)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
