"""Accounts and key files: discovery order, file modes, nonces, actors, and errors that never leak a seed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import nacl.signing
import pytest

from watchtower.client.account import (
    DEFAULT_ACCOUNT,
    ENV_ACCOUNT,
    ENV_KEY_FILE,
    Account,
    NonceClock,
    account_key_path,
    key_file_mode,
    list_accounts,
    load_publisher_key,
    publisher_key_path,
    replace_publisher_key,
    resolve_account,
    save_publisher_key,
    write_key_file,
)
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import verify_command


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "wt-home"
    monkeypatch.setenv("WATCHTOWER_HOME", str(root))
    monkeypatch.delenv(ENV_ACCOUNT, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    return root


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave files world-readable: the modes must not depend on it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def seed_hex(account: Account) -> str:
    return bytes(account.signing_key).hex()


# --- Discovery order -----------------------------------------------------------------------------


def test_discovery_order_flag_beats_env_and_path_beats_name(home: Path, tmp_path: Path) -> None:
    default, alice, bob = Account.create(), Account.create("alice"), Account.create("bob")
    loose = tmp_path / "loose.key"
    carol = nacl.signing.SigningKey.generate()
    write_key_file(loose, carol)
    carol_address = Account(carol).address

    assert resolve_account(env={}).address == default.address
    assert resolve_account(env={ENV_ACCOUNT: "alice"}).address == alice.address
    both_env = {ENV_ACCOUNT: "alice", ENV_KEY_FILE: str(loose)}
    assert resolve_account(env=both_env).address == carol_address
    assert resolve_account("bob", env=both_env).address == bob.address
    assert resolve_account(key_file=loose, env={ENV_ACCOUNT: "alice"}).address == carol_address
    with pytest.raises(WatchtowerError) as info:
        resolve_account("bob", loose, env={})
    assert info.value.code == "INVALID_ARGUMENT"


def test_environment_is_read_when_no_env_mapping_is_given(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alice = Account.create("alice")
    monkeypatch.setenv(ENV_ACCOUNT, "alice")
    assert resolve_account().address == alice.address


def test_missing_account_says_how_to_create_it(home: Path) -> None:
    with pytest.raises(WatchtowerError) as info:
        resolve_account(env={})
    assert info.value.code == "ACCOUNT_NOT_FOUND"
    assert str(account_key_path(DEFAULT_ACCOUNT)) in info.value.message
    assert "watchtower account new" in info.value.message
    with pytest.raises(WatchtowerError) as named:
        resolve_account("ops", env={})
    assert "watchtower account new ops" in named.value.message


@pytest.mark.parametrize("name", ["../escape", "", "a/b", ".hidden", "x" * 65, "white space"])
def test_account_names_cannot_escape_the_home(home: Path, name: str) -> None:
    with pytest.raises(WatchtowerError) as info:
        Account.create(name)
    assert info.value.code == "INVALID_ARGUMENT"
    assert not (home / "escape.key").exists()


# --- Files ---------------------------------------------------------------------------------------


def test_key_files_are_0600_in_0700_directories(home: Path, open_umask: None) -> None:
    account = Account.create()
    actor = account.create_actor("ingest")
    save_publisher_key("s-0123", nacl.signing.SigningKey.generate())
    assert key_file_mode(account_key_path(DEFAULT_ACCOUNT)) == 0o600
    assert actor.key_file is not None
    assert key_file_mode(actor.key_file) == 0o600
    assert key_file_mode(actor.key_file.with_suffix(".json")) == 0o600
    assert key_file_mode(publisher_key_path("s-0123")) == 0o600
    for sub in ("accounts", "actors", "publishers"):
        assert key_file_mode(home / sub) == 0o700


def test_key_file_round_trips_and_is_never_overwritten(home: Path) -> None:
    first = Account.create("alice")
    with pytest.raises(WatchtowerError) as info:
        Account.create("alice")
    assert info.value.code == "ACCOUNT_EXISTS"
    assert Account.load("alice").address == first.address
    assert account_key_path("alice").read_text().strip() == seed_hex(first)


@pytest.mark.parametrize(
    "content",
    [b"", b"not hex at all\n", b"ab" * 31 + b"\n", b"ab" * 33, b"\xff\xfe\x00binary"],
    ids=["empty", "text", "short", "long", "binary"],
)
def test_corrupt_key_file_names_file_and_fix_without_content(home: Path, content: bytes) -> None:
    path = account_key_path("broken")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(WatchtowerError) as info:
        Account.load("broken")
    err = info.value
    assert err.code == "KEY_FILE_INVALID"
    assert str(path) in err.message
    assert "watchtower account new" in err.message
    if len(content) > 8:
        assert content.decode("ascii", "ignore").strip()[:16] not in err.message


def test_key_file_that_cannot_be_read_names_the_file(home: Path) -> None:
    # A directory where the key file should be is unreadable for every user, root included.
    path = account_key_path("blocked")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    with pytest.raises(WatchtowerError) as info:
        Account.load("blocked")
    assert info.value.code == "KEY_FILE_INVALID"
    assert str(path) in info.value.message


def test_list_accounts_reports_a_corrupt_file_instead_of_failing(home: Path) -> None:
    good = Account.create("good")
    account_key_path("bad").write_text("zz\n")
    entries = {e["name"]: e for e in list_accounts()}
    assert entries["good"]["address"] == good.address
    assert entries["bad"]["address"] is None
    assert "corrupt" in entries["bad"]["error"]


def test_no_seed_in_repr_or_description(home: Path) -> None:
    account = Account.create()
    assert seed_hex(account) not in repr(account)
    assert seed_hex(account) not in str(account.describe())


# --- Nonces and signing --------------------------------------------------------------------------


def test_nonces_strictly_increase_under_threads() -> None:
    clock = NonceClock()
    out: list[int] = []
    lock = threading.Lock()

    def draw() -> None:
        got = [clock.next("0xabc") for _ in range(2000)]
        with lock:
            out.extend(got)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == len(out) == 8000


def test_nonces_of_one_account_increase_across_calls(home: Path) -> None:
    account = Account.create()
    nonces = [account.sign("publish", "s-1", {}).nonce for _ in range(500)]
    assert nonces == sorted(nonces)
    assert len(set(nonces)) == len(nonces)


def test_two_processes_in_a_row_never_reuse_a_nonce() -> None:
    code = "from watchtower.client.account import NONCES; print(NONCES.next('0xabc'))"
    first, second = (int(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(2))
    assert second > first


def test_sign_produces_a_verifiable_command_from_this_caller(home: Path) -> None:
    account = Account.create()
    cmd = account.sign("subscribe", "s-1", {"mode": "PULL"})
    verify_command(cmd)
    assert cmd.caller == account.address
    assert account.sign("subscribe", "s-1", {"mode": "PULL"}, nonce=7).nonce == 7


# --- Actors --------------------------------------------------------------------------------------


def test_actor_records_its_parent_and_is_listed_only_by_it(home: Path) -> None:
    alice, bob = Account.create("alice"), Account.create("bob")
    bot = alice.create_actor("bot")
    bob.create_actor("other")
    assert bot.parent == alice.address
    assert bot.is_actor
    assert bot.address != alice.address
    assert [a["name"] for a in alice.list_actors()] == ["bot"]
    assert alice.list_actors()[0]["address"] == bot.address
    assert Account.load_actor("bot").parent == alice.address
    by_path = resolve_account(key_file=bot.key_file, env={})
    assert (by_path.address, by_path.parent) == (bot.address, alice.address)


def test_actor_names_are_unique_and_actors_cannot_create_actors(home: Path) -> None:
    alice = Account.create()
    bot = alice.create_actor("bot")
    with pytest.raises(WatchtowerError) as taken:
        alice.create_actor("bot")
    assert taken.value.code == "ACCOUNT_EXISTS"
    with pytest.raises(WatchtowerError) as nested:
        bot.create_actor("sub")
    assert nested.value.code == "INVALID_ARGUMENT"


# --- Publisher keys ------------------------------------------------------------------------------


def test_publisher_key_rotation_keeps_the_old_key(home: Path) -> None:
    old, new = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    save_publisher_key("s-feed", old)
    replace_publisher_key("s-feed", new, old_signing_key_id=1)
    assert bytes(load_publisher_key("s-feed")) == bytes(new)
    retired = publisher_key_path("s-feed", signing_key_id=1)
    assert retired.name == "s-feed.1.key"
    assert retired.read_text().strip() == bytes(old).hex()


def test_missing_publisher_key_points_at_the_flag(home: Path) -> None:
    with pytest.raises(WatchtowerError) as info:
        load_publisher_key("s-elsewhere")
    assert info.value.code == "ACCOUNT_NOT_FOUND"
    assert "--publisher-key-file" in info.value.message
