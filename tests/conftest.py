"""Suite-wide setup: nothing a test does may write into the user's real tuning database."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_tuning_db(tmp_path_factory):
    # Session-wide and in os.environ (not monkeypatch) so subprocesses, such as the real
    # `convsel serve` test, inherit it too.
    path = tmp_path_factory.mktemp("tuning") / "tuning.sqlite"
    previous = os.environ.get("CONVSEL_TUNING_DB")
    os.environ["CONVSEL_TUNING_DB"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("CONVSEL_TUNING_DB", None)
    else:
        os.environ["CONVSEL_TUNING_DB"] = previous
