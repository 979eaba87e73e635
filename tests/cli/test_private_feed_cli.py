"""Confidential private feeds from the command line, on the SDK's in-process `FakeApi` (no broker).

``new feed --policy private-allowlist --confidential`` records the flag (and is refused without the
policy); ``feed ID keyloads`` lists each keyload's audience by address and account key id and never
a key; ``feed ID get-since --decrypt`` unmasks a confidential feed for a member and shows
UNAUTHORIZED where the account is not in the keyload.
"""

from __future__ import annotations

import json
from pathlib import Path

import nacl.public
import pytest
from click.testing import CliRunner, Result

from watchtower.cli import audience_cmd, feed_cmd, new_feed_cmd, paid_feed_cmd, private_feed_cmd
from watchtower.cli.account_cmd import load_account
from watchtower.cli.main import _register, cli
from watchtower.client.account import Account, load_publisher_key
from watchtower.client.account_keys import commit_pending_key, new_pending_key
from watchtower.client.fake import FakeApi
from watchtower.client.private import ConfidentialPublisher
from watchtower.client.sdk import Publisher
from watchtower.protocol.confidential.keyload import Keyload, Recipient

SID = "s-confidential"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _register()
    fake = FakeApi()
    monkeypatch.setattr(feed_cmd, "ApiClient", lambda *_a, **_k: fake)
    monkeypatch.setattr(audience_cmd, "ApiClient", lambda *_a, **_k: fake)
    monkeypatch.setattr(new_feed_cmd, "ApiClient", lambda *_a, **_k: fake)
    monkeypatch.setattr(private_feed_cmd, "ApiClient", lambda *_a, **_k: fake)
    monkeypatch.setattr(paid_feed_cmd, "ApiClient", lambda *_a, **_k: fake)
    return fake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def member_key(account: Account) -> Recipient:
    """A registered-looking X25519 account key (id 1) kept where `account keys add` keeps it."""
    key, _ = new_pending_key(account)
    commit_pending_key(account, 1)
    return Recipient(account.address, 1, bytes(key.public_key))


def test_new_feed_confidential_needs_the_private_allowlist_policy(api: FakeApi) -> None:
    assert run("account", "new", "--json").exit_code == 0
    refused = CliRunner().invoke(cli, ["new", "feed", "--name", "c", "--confidential", "--stream-id", SID])
    assert refused.exit_code != 0
    assert "--policy private-allowlist" in refused.output
    assert SID not in api.states
    done = run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential", "--stream-id", SID,
               "--json")
    assert done.exit_code == 0, done.output
    config = api.states[SID].config
    assert config is not None
    assert config.confidential is True


def test_keyloads_lists_audiences_and_a_member_decrypts(api: FakeApi) -> None:
    assert run("account", "new", "--json").exit_code == 0
    assert run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential",
               "--stream-id", SID).exit_code == 0
    owner = load_account(None, None)
    outsider = "0x" + "ab" * 32
    api.command(owner.sign("allowlist_add", SID, {"address": outsider}))
    pub = ConfidentialPublisher(Publisher(api, owner, SID, load_publisher_key(SID)))  # type: ignore[arg-type]
    me = member_key(owner)
    other = Recipient(outsider, 3, bytes(nacl.public.PrivateKey.generate().public_key))
    first: Keyload = pub.rekey([me, other])                   # 1
    pub.publish("tick", b'{"n":1}')                           # 2
    pub.rekey([other])                                        # 3: the owner's account no longer in it
    pub.publish("tick", b'{"n":2}')                           # 4

    listed = run("feed", SID, "keyloads", "--json")
    assert listed.exit_code == 0, listed.output
    keyloads = json.loads(listed.output)["keyloads"]
    assert [k["sequences"] for k in keyloads] == [[1], [3]]
    assert keyloads[0]["keyload_id"] == first.keyload_id.hex()
    expected = [{"address": owner.address, "account_key_id": 1}, {"address": outsider, "account_key_id": 3}]
    assert keyloads[0]["members"] == sorted(expected, key=lambda m: str(m["address"]))
    assert keyloads[1]["members"] == [{"address": outsider, "account_key_id": 3}]
    assert all(k["complete"] for k in keyloads)
    text = run("feed", SID, "keyloads").output
    assert f"  {outsider}  account key 3" in text
    for output in (listed.output, text):
        assert first.session_key.hex() not in output

    read = run("feed", SID, "get-since", "--cursor", "0", "--decrypt", "--json")
    assert read.exit_code == 0, read.output
    rows = {r["sequence"]: r for r in json.loads(read.output)["messages"]}
    assert rows[2]["plaintext"] == '{"n":1}'
    assert rows[4]["error"]["code"] == "UNAUTHORIZED"
    assert first.session_key.hex() not in read.output
    after = json.loads(run("feed", SID, "get-since", "--cursor", "2", "--decrypt", "--json").output)
    assert [r["sequence"] for r in after["messages"]] == [3, 4]
    plain = run("feed", SID, "get-since", "--cursor", "0", "--decrypt").output
    assert '#2  tick  {"n":1}' in plain
    assert "#4  tick  <UNAUTHORIZED>" in plain
    # `consume`, the public CLI's pull-verify-decrypt, reads a confidential feed the same way.
    consumed = run("feed", SID, "consume", "--cursor", "0", "--json")
    assert consumed.exit_code == 0, consumed.output
    assert json.loads(consumed.output) == json.loads(read.output)


# --- the owner's side: rekey, publish, reseal ----------------------------------------------------


class Accounts:
    """The account keys the API serves (GET /v1/accounts/{address}), as registered."""

    def __init__(self, api: FakeApi) -> None:
        self.keys: dict[str, list[dict[str, object]]] = {}
        api.account_info = self.info  # type: ignore[attr-defined]

    def info(self, address: str) -> dict[str, object]:
        return {"account": address, "balance_cby": 0, "keys": self.keys.get(address, []), "authorizations": []}

    def register(self, account: Account, key_id: int = 1) -> None:
        key, _ = new_pending_key(account)
        commit_pending_key(account, key_id)
        for old in self.keys.get(account.address, []):
            old["status"] = "REVOKED"
        self.keys.setdefault(account.address, []).append(
            {"account_key_id": key_id, "scheme": "X25519", "public_key_hex": bytes(key.public_key).hex(),
             "status": "ACTIVE"})


def refusal(*args: str) -> str:
    """What a refused command says: click's usage errors in the output, Watchtower errors raised
    (the `watchtower` entry point prints them with their code)."""
    done = CliRunner().invoke(cli, list(args))
    assert done.exit_code != 0
    return done.output + str(done.exception or "")


def named(name: str) -> Account:
    assert run("account", "new", name, "--json").exit_code == 0
    return load_account(name, None)


def read_as(name: str | None) -> dict[int, dict[str, object]]:
    args = ["feed", SID, "get-since", "--cursor", "0", "--decrypt", "--json"] + (["--account", name] if name else [])
    done = run(*args)
    assert done.exit_code == 0, done.output
    return {r["sequence"]: r for r in json.loads(done.output)["messages"]}


def test_the_owner_rekeys_publishes_and_reseals_from_the_command_line(api: FakeApi) -> None:
    owner = named("owner")
    assert run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential",
               "--stream-id", SID, "--account", "owner").exit_code == 0
    accounts = Accounts(api)
    alice, carol = named("alice"), named("carol")
    for who in (owner, alice, carol):
        accounts.register(who)
    api.command(owner.sign("allowlist_add", SID, {"address": alice.address}))

    assert "rekey --branch main" in refusal("feed", SID, "publish", "--kind", "tick", "--data", "{}",
                                            "--account", "owner")  # no keyload yet: says what to run
    first = json.loads(run("feed", SID, "rekey", "--json", "--account", "owner").output)
    assert (first["rekeyed"], first["members"], first["left_out"]) == (True, 2, [])
    assert run("feed", SID, "publish", "--kind", "tick", "--data", '{"n":1}', "--account", "owner").exit_code == 0
    again = json.loads(run("feed", SID, "rekey", "--if-changed", "--json", "--account", "owner").output)
    assert again["rekeyed"] is False                                        # no one joined, left or rotated

    api.command(owner.sign("allowlist_add", SID, {"address": carol.address}))
    joined = json.loads(run("feed", SID, "rekey", "--if-changed", "--json", "--account", "owner").output)
    assert (joined["rekeyed"], joined["members"]) == (True, 3)              # carol joined
    assert run("feed", SID, "publish", "--kind", "tick", "--data", '{"n":2}', "--account", "owner").exit_code == 0
    rows = read_as("carol")
    assert rows[4]["plaintext"] == '{"n":2}'
    assert rows[2]["error"]["code"] == "UNAUTHORIZED"                      # from its join only

    resealed = run("feed", SID, "reseal", "--to", carol.address, "--keyload", first["keyload_id"], "--json",
                   "--account", "owner")
    assert resealed.exit_code == 0, resealed.output
    assert json.loads(resealed.output)["resealed"][0]["keyload_id"] == first["keyload_id"]
    assert read_as("carol")[2]["plaintext"] == '{"n":1}'                  # the history the owner chose

    accounts.register(carol, key_id=2)                                      # carol rotates her account key
    rotated = json.loads(run("feed", SID, "rekey", "--if-changed", "--json", "--account", "owner").output)
    assert rotated["rekeyed"] is True
    api.command(owner.sign("allowlist_remove", SID, {"address": alice.address}))
    assert "left the allowlist" in refusal("feed", SID, "publish", "--kind", "tick", "--data", "{}",
                                           "--account", "owner")
    assert json.loads(run("feed", SID, "rekey", "--json", "--account", "owner").output)["members"] == 2
    assert run("feed", SID, "publish", "--kind", "tick", "--data", '{"n":3}', "--account", "owner").exit_code == 0
    alice_rows, carol_rows = read_as("alice"), read_as("carol")
    head = max(carol_rows)
    assert carol_rows[head]["plaintext"] == '{"n":3}'                       # with her new key (and old ones: n:1, n:2)
    assert carol_rows[4]["plaintext"] == '{"n":2}'
    assert alice_rows[head]["error"]["code"] == "UNAUTHORIZED"              # removed: nothing after
    assert alice_rows[2]["plaintext"] == '{"n":1}'                          # everything before


def test_only_the_owner_rekeys_and_reseals_only_to_allowlisted_members(api: FakeApi) -> None:
    owner = named("owner")
    assert run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential",
               "--stream-id", SID, "--account", "owner").exit_code == 0
    accounts = Accounts(api)
    mallory = named("mallory")
    accounts.register(owner)
    accounts.register(mallory)
    assert "only the owner" in refusal("feed", SID, "rekey", "--account", "mallory")
    assert "not on the allowlist" in refusal("feed", SID, "reseal", "--to", mallory.address, "--account", "owner")


def test_the_demo_step_shows_each_member_what_it_may_read(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    from watchtower.cli.demo_private import show_confidential_feed

    show_confidential_feed(api, named("demo-owner"))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert ("alice reads: ['before bob left #1', 'before bob left #2', 'after bob left', 'after carol joined', "
            "'pro only']") in out
    assert ("bob reads: ['before bob left #1', 'before bob left #2', 'UNAUTHORIZED', 'UNAUTHORIZED', "
            "'UNAUTHORIZED']") in out
    assert ("carol reads: ['before bob left #1', 'before bob left #2', 'UNAUTHORIZED', 'after carol joined', "
            "'UNAUTHORIZED']") in out


def test_after_a_removal_publish_is_refused_before_anything_is_sent_and_rekey_re_keys_first(api: FakeApi) -> None:
    owner = named("owner")
    assert run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential",
               "--stream-id", SID, "--account", "owner").exit_code == 0
    accounts = Accounts(api)
    alice, bob = named("alice"), named("bob")
    for who in (owner, alice, bob):
        accounts.register(who)
    for who in (alice, bob):
        api.command(owner.sign("allowlist_add", SID, {"address": who.address}))
    assert run("feed", SID, "rekey", "--account", "owner").exit_code == 0
    assert run("feed", SID, "publish", "--kind", "tick", "--data", '{"n":1}', "--account", "owner").exit_code == 0
    api.command(owner.sign("allowlist_remove", SID, {"address": bob.address}))

    sent: list[object] = []
    command = api.command
    api.command = lambda cmd, **kw: (sent.append(cmd), command(cmd, **kw))[1]  # type: ignore[method-assign]
    said = refusal("feed", SID, "publish", "--kind", "tick", "--data", '{"secret":1}', "--account", "owner")
    assert sent == []                                                       # nothing masked left the process
    assert f"{bob.address} left the allowlist" in said
    assert f"watchtower feed {SID} rekey --branch main" in said

    bob_key = accounts.keys[bob.address][0]
    accounts.register(alice, key_id=2)                                      # alice rotates: stale as well
    done = run("feed", SID, "publish", "--kind", "tick", "--data", '{"n":2}', "--rekey", "--json", "--account", "owner")
    assert done.exit_code == 0, done.output
    assert [c.method for c in sent] == ["publish", "publish"]              # a new keyload, then the message
    rows = read_as("alice")
    assert rows[max(rows)]["plaintext"] == '{"n":2}'
    assert read_as("bob")[max(rows)]["error"]["code"] == "UNAUTHORIZED"
    assert bob_key["status"] == "ACTIVE"                                    # bob left by the allowlist alone


def test_allowlist_remove_returns_once_the_read_side_shows_the_removal(api: FakeApi,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The next publish checks the allowlist on the read side, which folds a removal a moment after
    the writer acknowledged it: `allowlist remove` waits for it."""
    owner = named("owner")
    assert run("new", "feed", "--name", "c", "--policy", "private-allowlist", "--confidential",
               "--stream-id", SID, "--account", "owner").exit_code == 0
    bob = "0x" + "b0" * 32
    api.command(owner.sign("allowlist_add", SID, {"address": bob}))
    fresh = api.stream_info
    lagging = {"reads": 0}

    def stream_info(stream_id: str) -> dict[str, object]:
        lagging["reads"] += 1
        info = fresh(stream_id)
        return {**info, "allowlist": [*info["allowlist"], bob]} if lagging["reads"] <= 3 else info

    monkeypatch.setattr(api, "stream_info", stream_info)
    done = run("feed", SID, "allowlist", "remove", bob, "--account", "owner")
    assert done.exit_code == 0, done.output
    assert lagging["reads"] >= 4                                            # returned only once it showed
    assert bob not in api.stream_info(SID)["allowlist"]
