"""`watchtower feed ID announce-key-epoch EPOCH`: CIP-7 announce_key_epoch from the command line.

Pure: the CLI's API client is the SDK's in-process `FakeApi` (the stream actor's own rules).
Failed before the fix: there was no such command (usage error).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from watchtower.cli import feed_cmd
from watchtower.cli.account_cmd import load_account
from watchtower.cli.main import _register, cli
from watchtower.client.fake import FakeApi


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _register()
    fake = FakeApi()
    monkeypatch.setattr(feed_cmd, "ApiClient", lambda *_a, **_k: fake)
    return fake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_owner_announces_key_epochs_and_they_never_go_back(api: FakeApi) -> None:
    assert run("account", "new", "--json").exit_code == 0
    owner = json.loads(run("account", "show", "--json").output)["address"]
    account = load_account(None, None)
    assert account.address == owner
    api.command(account.sign("create_stream", "s-epochs", {"publisher_key_hex": "11" * 32}))
    done = run("feed", "s-epochs", "announce-key-epoch", "4", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["key_epoch"] == 4
    assert api.states["s-epochs"].last_key_epoch == 4
    text = run("feed", "s-epochs", "announce-key-epoch", "6")
    assert "key epoch 6 from block" in text.output
    back = CliRunner().invoke(cli, ["feed", "s-epochs", "announce-key-epoch", "5"])
    assert back.exit_code != 0
    assert getattr(back.exception, "code", None) == "INVALID_ARGUMENT"
