"""The library's one configuration: every setting read from its variable in convsel/config.py,
and nowhere else in the library."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from repo import ROOT

from convsel import config
from convsel.config import Config


def test_every_field_is_read_from_its_variable():
    env = {var: f"value-of-{var}" for var in config.VARIABLES}
    read = Config.from_env(env)
    for var, field in config.VARIABLES.items():
        value = getattr(read, field)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        assert value == f"value-of-{var}", field
    assert set(config.VARIABLES.values()) == set(Config.model_fields)


def test_the_variables_are_convsels_or_the_ones_other_libraries_define():
    assert config.variable("tuning_db") == "CONVSEL_TUNING_DB"
    assert config.variable("pyopencl_ctx") == "PYOPENCL_CTX"
    assert {config.variable(f) for f in config.BLAS_THREAD_FIELDS} == {
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"}


def test_an_empty_variable_is_not_set_but_an_empty_token_stays_a_token():
    read = Config.from_env({"CONVSEL_TUNING_DB": "", "CONVSEL_API_TOKEN": "",
                            "OMP_NUM_THREADS": ""})
    assert read.tuning_db is None and read.omp_num_threads is None
    assert read.api_token is not None and read.api_token.get_secret_value() == ""


def test_paths_are_kept_as_text():
    assert Config(heuristics=Path("/etc/rules.yaml")).heuristics == "/etc/rules.yaml"


def test_blas_thread_variables_are_the_ones_set(monkeypatch):
    for field in config.BLAS_THREAD_FIELDS:
        monkeypatch.delenv(config.variable(field), raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert config.current().blas_thread_variables() == {"OMP_NUM_THREADS": "1"}


def test_the_library_reads_the_environment_only_in_config():
    readers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "convsel").rglob("*.py")
                     if p.name != "config.py" and any(
                         word in p.read_text() for word in ("os.environ", "getenv(")))
    assert readers == []


def test_no_module_spells_a_variable_of_the_configuration():
    """Modules name a variable through config.variable(), never by its text."""
    spelled = sorted((str(p.relative_to(ROOT)), var) for p in (ROOT / "convsel").rglob("*.py")
                     if p.name != "config.py"
                     for var in config.VARIABLES if f'"{var}"' in p.read_text())
    assert spelled == []


def test_the_client_takes_its_token_from_the_configuration(monkeypatch):
    import pytest

    httpx = pytest.importorskip("httpx")
    from convsel.client import Client

    seen = []
    transport = httpx.MockTransport(lambda request: seen.append(
        request.headers.get("authorization")) or httpx.Response(200, json={"status": "ok"}))
    monkeypatch.setenv("CONVSEL_API_TOKEN", "from-env")
    with Client("http://server", transport=transport) as c:
        c.health()
    with Client("http://server", token="given", transport=transport) as c:
        c.health()
    monkeypatch.setenv("CONVSEL_API_TOKEN", "")
    with Client("http://server", transport=transport) as c:
        c.health()
    assert seen == ["Bearer from-env", "Bearer given", None]
