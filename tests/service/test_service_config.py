"""The service's Settings extend the library's Config: the same variables, read by the same
rule, and no library field restated."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_settings")

from pydantic import SecretStr

from convsel import config
from convsel.config import Config
from service.config import Settings


def test_settings_restate_no_library_field():
    own = set(Settings.__annotations__)
    assert own & set(Config.model_fields) == set()
    assert set(Config.model_fields) <= set(Settings.model_fields)


def test_settings_read_the_librarys_fields_from_the_librarys_variables(monkeypatch):
    for var in config.VARIABLES:
        monkeypatch.setenv(var, f"value-of-{var}")
    settings, library = Settings(), config.current()
    for field in Config.model_fields:
        mine, theirs = getattr(settings, field), getattr(library, field)
        if isinstance(mine, SecretStr):
            mine, theirs = mine.get_secret_value(), theirs.get_secret_value()
        assert mine == theirs == f"value-of-{config.variable(field)}", field


def test_an_empty_variable_means_the_same_to_both(monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", "")
    monkeypatch.setenv("CONVSEL_API_TOKEN", "")
    settings = Settings()
    assert settings.tuning_db is None and config.current().tuning_db is None
    assert settings.api_token is not None   # an empty token keeps the guarded routes closed
