"""Target names (issue 25, item 9): case and separators do not matter for known names, and a
name that resolves to no target is an error listing close matches, in the library, the CLI and
the service alike (all three go through convsel.targets)."""

from __future__ import annotations

import pytest
from service_support import assert_error, client_for

from convsel import ConvProblem, UnknownTargetError, select
from convsel.cli import main

P = ConvProblem.from_dict({"n": 1, "h": 8, "w": 8, "c": 16, "k": 16, "kh": 3, "kw": 3, "pad": 1})
SPELLINGS_OF_G77 = ["mali-g77", "MALI-G77", "Mali G77", "mali_g77", "g 77", "Mali-G77 MC9"]


@pytest.mark.parametrize("name", SPELLINGS_OF_G77)
def test_library_spellings_of_a_known_name(name):
    assert select(P, name).target == "G77"


@pytest.mark.parametrize("name,expected", [
    ("CPU_NOFP16", "cpu-nofp16"), ("Mali G78 AE", "G78AE"), ("mali-g51big", "G51BIG"),
    ("Mali-G925-Immortalis", "FIFTHGEN"),    # a real model ACL maps by its first letter
])
def test_library_other_spellings(name, expected):
    assert select(P, name).target == expected


@pytest.mark.parametrize("name,close", [("Mali-G999", "G925"), ("G7100", "G710"),
                                        ("cpu2", "cpu")])
def test_library_unknown_name_is_an_error_with_close_matches(name, close):
    with pytest.raises(UnknownTargetError) as info:
        select(P, name)
    assert info.value.field == "target" and info.value.value == name
    assert "close matches" in info.value.rule and close in info.value.rule


def test_unknown_mali_model_says_what_acl_would_assume():
    with pytest.raises(UnknownTargetError, match="pass 'FIFTHGEN'"):
        select(P, "Mali-G999")


def test_cli(capsys):
    base = ["select", "--h", "8", "--w", "8", "--c", "16", "--k", "16", "--kernel", "3",
            "--pad", "1", "--json"]
    assert main([*base, "--target", "MALI-G77"]) == 0
    assert '"target": "G77"' in capsys.readouterr().out
    assert main([*base, "--target", "Mali-G999"]) == 2
    err = capsys.readouterr().err
    assert "unknown target" in err and "G925" in err


def test_service():
    with client_for() as client:
        problem = P.to_dict()
        r = client.post("/v1/select", json={"problem": problem, "target": "Mali G77"})
        assert r.status_code == 200 and r.json()["target"] == "G77", r.text
        body = assert_error(client.post("/v1/select",
                                        json={"problem": problem, "target": "Mali-G999"}),
                            422, "unknown_target", "target")
        assert "close matches" in body["message"]
