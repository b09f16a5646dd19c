"""Write constraints.txt: the exact version of every package convsel's extras pull in, as this
environment has them. scripts/setup.sh and the Dockerfile install with ``-c constraints.txt``,
so a fresh checkout, CI and the image get the versions the suite passed with.

    .venv/bin/python scripts/constraints.py          # after changing pyproject.toml or upgrading

Only convsel's own dependency tree is written (all extras but ``bench``, which pins torch for
benchmarks only), not whatever else is installed. Environment markers are evaluated here, so
a package this platform does not need is not pinned (pip then resolves it freely elsewhere).
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "convsel"
LEFT_OUT_EXTRAS = {"bench"}


def _project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"])


def requires(dist: str) -> list[str]:
    """What ``dist`` requires: convsel's from pyproject.toml (the installed metadata may be
    older), any other's from its installed metadata."""
    if canonicalize_name(dist) != PROJECT:
        return metadata.requires(dist) or []
    project = _project()
    out = list(project.get("dependencies", []))
    for extra, reqs in project.get("optional-dependencies", {}).items():
        out += [f"{r}; extra == '{extra}'" if ";" not in r else
                f"{r.split(';')[0]}; ({r.split(';', 1)[1]}) and extra == '{extra}'"
                for r in reqs]
    return out


def requirements(dist: str, extras: set[str]) -> list[Requirement]:
    """``dist``'s requirements that apply here with ``extras`` requested."""
    out = []
    for text in requires(dist):
        req = Requirement(text)
        environments = [{"extra": e} for e in extras] or [{"extra": ""}]
        if req.marker is None or any(req.marker.evaluate(env) for env in environments):
            out.append(req)
    return out


def closure() -> dict[str, str]:
    """name -> installed version of every distribution convsel's extras reach."""
    extras = set(_project().get("optional-dependencies", {})) - LEFT_OUT_EXTRAS
    pinned: dict[str, str] = {}
    todo = [(PROJECT, extras)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        dist, wanted = todo.pop()
        key = (canonicalize_name(dist), frozenset(wanted))
        if key in seen:
            continue
        seen.add(key)
        for req in requirements(dist, wanted):
            name = canonicalize_name(req.name)
            if name == PROJECT:   # convsel[all] names convsel's own extras
                todo.append((PROJECT, set(req.extras) - LEFT_OUT_EXTRAS))
                continue
            try:
                pinned[name] = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                sys.exit(f"{req.name} ({req}) is required but not installed: run "
                         "scripts/setup.sh dev first")
            todo.append((req.name, set(req.extras)))
    return pinned


def main() -> None:
    pins = closure()
    lines = ["# convsel's dependency tree, pinned to the versions of the environment the suite",
             "# passed in (all extras but bench). Used by scripts/setup.sh and the Dockerfile;",
             (f"# regenerate with: .venv/bin/python scripts/constraints.py (Python "
              f"{sys.version_info.major}.{sys.version_info.minor})"),
             *(f"{name}=={version}" for name, version in sorted(pins.items()))]
    (ROOT / "constraints.txt").write_text("\n".join(lines) + "\n")
    print(f"constraints.txt: {len(pins)} packages pinned")


if __name__ == "__main__":
    main()
