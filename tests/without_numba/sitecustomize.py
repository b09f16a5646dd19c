"""Put on PYTHONPATH (scripts/test.sh does) to run a test process as if numba, the ``cpu``
extra, were not installed: importing it raises ModuleNotFoundError, as it does where it is
missing. Python imports this module at start-up, before any test."""

from __future__ import annotations

import importlib.abc
import sys


class _NoNumba(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "numba" or name.startswith("numba."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoNumba())
