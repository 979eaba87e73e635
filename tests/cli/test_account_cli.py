"""`watchtower account …` through click, with WATCHTOWER_HOME in a temporary directory."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from watchtower.cli.main import _register, cli, main
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_ACCOUNT, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    _register()
    return tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def seeds(home: Path) -> list[str]:
    return [p.read_text().strip() for p in home.rglob("*.key")]


def test_new_show_list_round_trip(home: Path) -> None:
    created = run("account", "new", "--json")
    assert created.exit_code == 0, created.output
    info = json.loads(created.output)
    assert (info["name"], info["kind"]) == ("default", "account")
    assert info["address"].startswith("0x")
    assert len(info["address"]) == 66

    shown = json.loads(run("account", "show", "--json").output)
    assert shown["address"] == info["address"]
    assert shown["key_file"] == str(home / "accounts" / "default.key")

    run("account", "new", "ops")
    listed = json.loads(run("account", "list", "--json").output)["accounts"]
    assert [a["name"] for a in listed] == ["default", "ops"]
    table = run("account", "list").output.splitlines()
    assert table[0].split() == ["NAME", "ADDRESS"]
    assert table[1].split() == ["default", info["address"]]


def test_account_flag_env_and_key_file_select_the_signer(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run("account", "new")
    ops = json.loads(run("account", "new", "ops", "--json").output)
    assert json.loads(run("account", "show", "--json", "--account", "ops").output)["address"] == ops["address"]
    monkeypatch.setenv(ENV_ACCOUNT, "ops")
    assert json.loads(run("account", "show", "--json").output)["address"] == ops["address"]
    key_file = home / "accounts" / "ops.key"
    monkeypatch.setenv(ENV_ACCOUNT, "default")
    by_path = json.loads(run("account", "show", "--json", "--key-file", str(key_file)).output)
    assert by_path["address"] == ops["address"]


def test_human_output_is_short_and_never_shows_a_seed(home: Path) -> None:
    outputs = [run("account", "new").output, run("account", "show").output, run("account", "list").output,
               run("account", "new-actor", "ingest", "--local").output, run("account", "actors").output,
               run("account", "show", "--json").output, run("account", "actors", "--json").output]
    secrets = seeds(home)
    assert len(secrets) == 2
    for out in outputs:
        for secret in secrets:
            assert secret not in out
    assert outputs[0].splitlines()[0].split() == ["account", "default"]


def test_actors_are_created_and_listed_for_their_account(home: Path) -> None:
    parent = json.loads(run("account", "new", "--json").output)
    actor = json.loads(run("account", "new-actor", "ingest", "--local", "--json").output)
    assert (actor["kind"], actor["parent"]) == ("actor", parent["address"])
    listed = json.loads(run("account", "actors", "--json").output)
    assert listed["account"] == parent["address"]
    assert [(a["name"], a["address"]) for a in listed["actors"]] == [("ingest", actor["address"])]
    run("account", "new", "other")
    assert json.loads(run("account", "actors", "--json", "--account", "other").output)["actors"] == []
    empty = run("account", "actors", "--account", "other").output
    assert "new-actor" in empty


def test_empty_home_lists_nothing_and_explains(home: Path) -> None:
    assert json.loads(run("account", "list", "--json").output) == {"accounts": []}
    assert "watchtower account new" in run("account", "list").output


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["watchtower", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0), capsys.readouterr().err


def test_errors_are_one_line_with_the_code(home: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_main(monkeypatch, capsys, "account", "show")
    assert code == 1
    assert err.startswith("error [ACCOUNT_NOT_FOUND]")
    assert "watchtower account new" in err
    assert len(err.strip().splitlines()) == 1

    run("account", "new")
    code, err = run_main(monkeypatch, capsys, "account", "new")
    assert (code, err.startswith("error [ACCOUNT_EXISTS]")) == (1, True)

    (home / "accounts" / "broken.key").write_text("0123456789abcdef-not-a-seed\n")
    code, err = run_main(monkeypatch, capsys, "account", "show", "--account", "broken")
    assert err.startswith("error [KEY_FILE_INVALID]")
    assert str(home / "accounts" / "broken.key") in err
    assert "0123456789abcdef" not in err


def test_feed_commands_without_an_api_say_how_to_start_one(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    code, err = run_main(monkeypatch, capsys, "list", "--api", url)
    assert code == 1
    assert err.startswith("error [API_UNAVAILABLE]")
    assert "watchtower up" in err
    monkeypatch.setenv("WATCHTOWER_API", url)
    code, err = run_main(monkeypatch, capsys, "feed", "3", "get-head")
    assert "watchtower up" in err
