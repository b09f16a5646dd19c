"""`convsel tune --remote` and `convsel db push` against a real server (`convsel serve`): a
device times locally and uploads as it goes; a run whose uploads failed resumes them; a
database pushed whole; the token is needed."""

from __future__ import annotations

from service_support import free_port, served

from convsel.cli import main
from convsel.client import Client
from convsel.tuning import TuningDB, device_identity

TOKEN = "push-s3cret"
TUNE = ["tune", "--h", "8", "--w", "8", "--c", "4", "--k", "8", "--kernel", "3", "--pad", "1",
        "--min-time", "0", "--repeats", "2", "--warmup", "0", "--no-progress"]


def uploads(url: str) -> dict:
    ident = device_identity("numpy")
    with Client(url) as client:     # Client.devices(): GET /v1/devices
        listed = client.devices()["devices"]
    [row] = [d for d in listed
             if d["layer"] == "user" and d["name"] == ident["name"]
             and d["driver"] == ident["driver"]]
    return row


def test_tune_remote_resumes_and_db_push(tmp_path, capsys):
    server_db = tmp_path / "server.sqlite"
    local = str(tmp_path / "local.sqlite")
    dead = f"http://127.0.0.1:{free_port()}"
    # the server is down: tuning goes on locally and says what was not sent
    assert main([*TUNE, "--db", local, "--remote", dead, "--token", TOKEN]) == 0
    out = capsys.readouterr().out
    assert "1 not sent" in out and "run the same command again" in out
    assert len(TuningDB(local).entries()) == 1
    with served({"CONVSEL_TUNING_DB": str(server_db), "CONVSEL_API_TOKEN": TOKEN}) as (url, _):
        # the same command again: the layer is tuned already; its entry is sent now
        assert main([*TUNE, "--db", local, "--remote", url, "--token", TOKEN,
                     "--client", "dev-1"]) == 0
        out = capsys.readouterr().out
        assert "already tuned" in out and "1 accepted" in out, out
        row = uploads(url)
        assert row["uploads"]["count"] == 1 and row["shapes"] == 1
        # a new layer is uploaded as soon as it is measured
        assert main([*TUNE[:2], "10", *TUNE[3:], "--db", local, "--remote", url,
                     "--token", TOKEN]) == 0
        assert uploads(url)["shapes"] == 2
        # push the whole database: nothing new for the server; without the token: refused
        assert main(["db", "--db", local, "push", url, "--token", TOKEN]) == 0
        out = capsys.readouterr().out
        assert "2 merged" in out and "0 accepted" in out, out
        assert uploads(url)["uploads"]["count"] == 2
        assert main(["db", "--db", local, "push", url, "--token", "wrong"]) == 1
        assert "not sent" in capsys.readouterr().out
