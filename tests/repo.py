"""Where the repository is, for tests that read its files (README, scripts, heuristics.yaml)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
