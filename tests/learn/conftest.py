"""Fixtures of the learned-policy tests: this device's identity and a database of synthetic
timings (tests/learn_support.py says what rule they follow)."""

import pytest
from learn_support import entry_for, training_problems

from convsel.tuning.db import TuningDB
from convsel.tuning.measure import device_identity


@pytest.fixture(autouse=True)
def _fresh_caches(fresh_learn_caches):
    yield


@pytest.fixture
def ident() -> dict[str, str]:
    return device_identity("numpy")


@pytest.fixture
def db(tmp_path, ident) -> TuningDB:
    database = TuningDB(tmp_path / "tuning.sqlite")
    database.record_many([entry_for(p, ident) for p in training_problems()])
    return database
