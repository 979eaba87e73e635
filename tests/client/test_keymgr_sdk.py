"""The paid-feed SDK without a broker: account key files, sealed epoch keys, signed key-manager requests,
encrypted publishing and local decryption.

The key manager here is a small in-process HTTP server that follows the service's contract
(keymgr-interfaces §7) with the real envelope and sealed-box code; the same SDK runs against the
real service in tests/cli/test_paid_cli.py.
"""

from __future__ import annotations

import hashlib
import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.account_keys import (
    account_key_path,
    commit_pending_key,
    load_sealed_keys,
    new_pending_key,
    open_sealed_key,
    sealed_keys_path,
    store_sealed_keys,
)
from watchtower.client.fake import FakeApi
from watchtower.client.keymgr import ENV_KEYMGR, KeyManagerClient, resolve_keymgr_url
from watchtower.client.paid import EpochKeyRing, PaidPublisher
from watchtower.client.sdk import Publisher, create_feed
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.confidential.envelope import (
    derive_content_key,
    derive_nonce,
    envelope_aad,
    open_payload,
    seal_payload,
    wrap_epoch_key,
)
from watchtower.protocol.errors import (
    DecryptionFailedError,
    EntitlementRequiredError,
    KeyRevokedError,
    WatchtowerError,
)
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.signed_command import Command, verify_command
from watchtower.protocol.stream.message import StreamMessage

SEED = bytes(range(32))
STREAM = "s-paid0001"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def account(tmp_path: Path) -> Account:
    return Account.create("alice", home=tmp_path)


def _registered_key(account: Account, key_id: int = 1) -> nacl.public.PrivateKey:
    key, _ = new_pending_key(account)
    commit_pending_key(account, key_id)
    return key


# --- Key files and sealed boxes --------------------------------------------------------------------


def test_account_key_files_are_0600_in_a_0700_directory(account: Account) -> None:
    key, pending = new_pending_key(account)
    assert _mode(pending) == 0o600
    assert _mode(pending.parent) == 0o700
    final = commit_pending_key(account, 3)
    assert final == account_key_path(account, 3) == account.home / "account-keys" / "alice.3.x25519"
    assert not pending.exists()
    assert _mode(final) == 0o600
    assert final.read_text().strip() == bytes(key).hex()


def test_stored_epoch_keys_stay_sealed_and_private(account: Account) -> None:
    key = _registered_key(account)
    content_key = derive_content_key(SEED, STREAM, 7)
    sealed = wrap_epoch_key(content_key, bytes(key.public_key))
    path = store_sealed_keys(account, STREAM, {7: (1, sealed)})
    assert path == sealed_keys_path(account, STREAM)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert content_key.hex() not in path.read_text()  # never in clear at rest
    assert load_sealed_keys(account, STREAM) == {7: (1, sealed)}
    assert open_sealed_key(account, 1, sealed) == content_key


def test_a_sealed_epoch_key_opens_only_with_the_account_key_it_was_sealed_to(account: Account) -> None:
    _registered_key(account, 1)
    other = _registered_key(account, 2)
    sealed = wrap_epoch_key(derive_content_key(SEED, STREAM, 1), bytes(other.public_key))
    assert open_sealed_key(account, 2, sealed) == derive_content_key(SEED, STREAM, 1)
    with pytest.raises(DecryptionFailedError):
        open_sealed_key(account, 1, sealed)
    with pytest.raises(DecryptionFailedError):
        open_sealed_key(account, 2, sealed[:-1] + bytes([sealed[-1] ^ 1]))


def test_the_key_manager_url_comes_from_the_flag_then_the_environment_then_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_KEYMGR, raising=False)
    assert resolve_keymgr_url() == "http://127.0.0.1:8472"
    (tmp_path / "config.json").write_text(json.dumps({"keymgr_url": "http://127.0.0.1:9001/"}))
    assert resolve_keymgr_url() == "http://127.0.0.1:9001"
    monkeypatch.setenv(ENV_KEYMGR, "http://127.0.0.1:9002")
    assert resolve_keymgr_url() == "http://127.0.0.1:9002"
    assert resolve_keymgr_url("http://127.0.0.1:9003") == "http://127.0.0.1:9003"


# --- A key manager over HTTP -----------------------------------------------------------------------


class _KeyManager:
    """Follows the service contract: verifies each signed request, encrypts, seals epoch keys."""

    def __init__(self) -> None:
        self.receipt_key = nacl.signing.SigningKey.generate()
        self.requests: list[tuple[str, Command]] = []
        self.entitled_until: dict[str, int] = {}
        self.account_keys: dict[str, tuple[int, bytes]] = {}
        self.actor_nonce = 0

    def answer(self, path: str, cmd: Command) -> tuple[int, dict[str, Any]]:
        verify_command(cmd)
        self.requests.append((path, cmd))
        body = cmd.body
        if path == "/v1/keymgr/encrypt":
            self.actor_nonce += 1
            key = derive_content_key(SEED, cmd.stream_id, body["key_epoch"])
            envelope = seal_payload(content_key=key, aad=body["aad"], plaintext=body["plaintext"],
                                    nonce=derive_nonce(key, cmd.stream_id, body["key_epoch"], self.actor_nonce))
            receipt = self.receipt_key.sign(hashlib.sha256(envelope).digest()).signature
            return 200, {"envelope_hex": envelope.hex(), "keymgr_receipt_hex": receipt.hex(),
                         "key_epoch": body["key_epoch"], "actor_nonce": self.actor_nonce}
        if path == "/v1/keymgr/epoch-keys":
            until = self.entitled_until.get(body["account"])
            if until is None or body["to_key_epoch"] > until:
                return 403, {"error": {"code": "ENTITLEMENT_REQUIRED", "message": "buy the epochs first"}}
            key_id, public = self.account_keys[body["account"]]
            return 200, {"account_key_id": key_id, "keys": [
                {"key_epoch": e, "sealed_key_hex": wrap_epoch_key(derive_content_key(SEED, cmd.stream_id, e),
                                                                  public).hex()}
                for e in range(body["from_key_epoch"], body["to_key_epoch"] + 1)]}
        return 404, {"error": {"code": "NOT_FOUND", "message": path}}


@pytest.fixture
def keymgr() -> Iterator[tuple[_KeyManager, str]]:
    service = _KeyManager()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            status, answer = service.answer(self.path, Command.from_dict(json.loads(raw)["command"]))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_key_manager_requests_are_signed_by_the_account_with_growing_nonces(
        account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    service, url = keymgr
    client = KeyManagerClient(url)
    aad = envelope_aad(stream_id=STREAM, sequence=1, key_epoch=4, kind="k", content_type="application/json")
    first = client.encrypt(account, STREAM, key_epoch=4, aad=aad, plaintext=b'{"p": 1}')
    client.encrypt(account, STREAM, key_epoch=4, aad=aad, plaintext=b'{"p": 2}')
    (path, cmd), (_, again) = service.requests
    assert path == "/v1/keymgr/encrypt"
    assert (cmd.method, cmd.stream_id, cmd.caller) == ("stream_encrypt", STREAM, account.address)
    assert dict(cmd.body) == {"key_epoch": 4, "aad": aad, "plaintext": b'{"p": 1}'}
    assert again.nonce > cmd.nonce
    key = derive_content_key(SEED, STREAM, 4)
    assert open_payload(content_key=key, aad=aad, envelope=first.envelope) == b'{"p": 1}'
    service.receipt_key.verify_key.verify(hashlib.sha256(first.envelope).digest(), first.keymgr_receipt)


def test_a_refusal_arrives_as_the_spec_error(account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    _, url = keymgr
    with pytest.raises(EntitlementRequiredError):
        KeyManagerClient(url).epoch_keys(account, STREAM, account=account.address, from_key_epoch=1, to_key_epoch=1)


def test_an_absent_key_manager_says_how_to_start_it(account: Account) -> None:
    with pytest.raises(WatchtowerError) as err:
        KeyManagerClient("http://127.0.0.1:9", timeout=5).public_key()
    assert err.value.code == "API_UNAVAILABLE"
    assert "watchtower up" in err.value.message


def _paid_publisher(account: Account, url: str) -> PaidPublisher:
    config = PaidStreamConfig(fee_per_key_epoch_cby=10, protocol_fee_bps=250, publisher_treasury=account.address,
                              protocol_treasury=account.address)
    return PaidPublisher(None, account, STREAM, nacl.signing.SigningKey.generate(),  # type: ignore[arg-type]
                         KeyManagerClient(url), config=config, key_epoch=5)


def test_a_paid_publish_carries_only_ciphertext_and_the_key_managers_receipt(
        account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    _, url = keymgr
    publisher = _paid_publisher(account, url)
    cmd = publisher.publish_command(9, 1, "price", b'{"secret": 42}', {"symbol": "BTC"}, "application/json")
    assert b"secret" not in json.dumps(cmd.to_dict()).encode()
    body = dict(cmd.body)
    receipt = body.pop("keymgr_receipt")
    msg = StreamMessage.from_json_dict(body)
    assert (msg.payload_format, msg.key_epoch, msg.sequence) == ("CIPHERTEXT", 5, 9)
    assert len(receipt) == 64
    aad = envelope_aad(stream_id=STREAM, sequence=9, key_epoch=5, kind="price", content_type="application/json")
    assert open_payload(content_key=derive_content_key(SEED, STREAM, 5), aad=aad,
                        envelope=msg.payload_inline) == b'{"secret": 42}'


def test_a_subscriber_decrypts_locally_fetching_each_epoch_key_once(
        account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    service, url = keymgr
    key = _registered_key(account, 1)
    service.account_keys[account.address] = (1, bytes(key.public_key))
    service.entitled_until[account.address] = 5
    publisher = _paid_publisher(account, url)
    messages = [StreamMessage.from_json_dict({k: v for k, v in publisher.publish_command(
        seq, 1, "price", f"tick {seq}".encode(), None, "application/json").body.items() if k != "keymgr_receipt"})
        for seq in (1, 2, 3)]
    ring = EpochKeyRing(KeyManagerClient(url), account)
    subscriber = Subscriber(None, STREAM, decrypt=True, epoch_keys=ring)  # type: ignore[arg-type]
    assert [subscriber.plaintext(m) for m in messages] == [b"tick 1", b"tick 2", b"tick 3"]
    fetches = [c for p, c in service.requests if p == "/v1/keymgr/epoch-keys"]
    assert len(fetches) == 1  # one fetch, then every message of the epoch decrypts locally
    assert "EpochKeyRing" in repr(ring)
    assert derive_content_key(SEED, STREAM, 5).hex() not in repr(ring)
    # A new process opens the stored sealed key without asking again (its account key still ACTIVE).
    accounts = _AccountKeys({account.address: {1: "ACTIVE"}})
    again = Subscriber(None, STREAM, decrypt=True,  # type: ignore[arg-type]
                       epoch_keys=EpochKeyRing(KeyManagerClient(url), account, accounts=accounts))
    assert again.plaintext(messages[0]) == b"tick 1"
    assert len([p for p, _ in service.requests if p == "/v1/keymgr/epoch-keys"]) == 1


class _AccountKeys:
    """The API's account view of account keys: address -> {account key id: status}."""

    def __init__(self, keys: dict[str, dict[int, str]]) -> None:
        self.keys = keys

    def account_info(self, address: str) -> dict[str, Any]:
        return {"account": address, "keys": [{"account_key_id": i, "scheme": "X25519", "status": status}
                                             for i, status in self.keys.get(address, {}).items()]}


def test_a_stored_epoch_key_sealed_to_a_revoked_account_key_is_never_opened(
        account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    service, url = keymgr
    key = _registered_key(account, 1)
    api = FakeApi()  # the account view: key 1 registered, then revoked
    reply = api.command(account.sign("register_account_key", f"acct:{account.address}",
                                     {"scheme": "X25519", "public_key": bytes(key.public_key)}))
    assert reply["account_key_id"] == 1
    service.account_keys[account.address] = (1, bytes(key.public_key))
    service.entitled_until[account.address] = 5
    assert EpochKeyRing(KeyManagerClient(url), account, accounts=api).fetch(STREAM, 4, 5) == [4, 5]

    def fetches() -> int:
        return len([p for p, _ in service.requests if p == "/v1/keymgr/epoch-keys"])

    assert EpochKeyRing(KeyManagerClient(url), account, accounts=api).content_key(STREAM, 5) == \
        derive_content_key(SEED, STREAM, 5)                       # ACTIVE: opened from the store
    api.command(account.sign("revoke_account_key", f"acct:{account.address}", {"account_key_id": 1}))
    ring = EpochKeyRing(KeyManagerClient(url), account, accounts=api)
    with pytest.raises(KeyRevokedError, match="rewrap-epochs") as refused:
        ring.content_key(STREAM, 4)
    assert refused.value.details["account_key_id"] == 1
    assert "account keys add" in refused.value.message
    assert "cached=0" in repr(ring)                               # nothing was opened
    assert fetches() == 1
    # Without an account view the store cannot be checked: the key is fetched again instead.
    assert EpochKeyRing(KeyManagerClient(url), account).content_key(STREAM, 4) == derive_content_key(SEED, STREAM, 4)
    assert fetches() == 2


def test_the_cli_s_key_ring_checks_the_store_against_the_api(tmp_path: Path) -> None:
    from watchtower.cli.paid_feed_cmd import epoch_key_ring
    from watchtower.client.http import ApiClient

    api = ApiClient("http://127.0.0.1:9")
    ring = epoch_key_ring(api, "http://127.0.0.1:9", Account.create("reader", home=tmp_path))
    assert ring.accounts is api


def test_a_sponsor_without_entitlement_gets_no_key(tmp_path: Path, keymgr: tuple[_KeyManager, str]) -> None:
    service, url = keymgr
    sponsor, reader = Account.create("sponsor", home=tmp_path), Account.create("reader", home=tmp_path)
    service.entitled_until[reader.address] = 5
    service.account_keys[sponsor.address] = (1, bytes(_registered_key(sponsor).public_key))
    with pytest.raises(EntitlementRequiredError):
        EpochKeyRing(KeyManagerClient(url), sponsor).content_key(STREAM, 5)
    assert load_sealed_keys(sponsor, STREAM) == {}


class _ServedPage(FakeApi):
    """The in-memory API serving, for get_since, the page a test hands it (an honest or edited one)."""

    page: list[dict[str, Any]]

    def get_since(self, stream_id: str, cursor: int = 0, limit: int = 100, **kw: Any) -> dict[str, Any]:
        answer = super().get_since(stream_id, cursor, limit, **kw)
        return {**answer, "messages": self.page}


def test_ciphertext_is_verified_before_it_is_decrypted(account: Account, keymgr: tuple[_KeyManager, str]) -> None:
    service, url = keymgr
    service.account_keys[account.address] = (1, bytes(_registered_key(account).public_key))
    service.entitled_until[account.address] = 5
    api, publisher_key = _ServedPage(), nacl.signing.SigningKey.generate()
    created = create_feed(api, account, name="paid", publisher_key_hex=bytes(publisher_key.verify_key).hex())
    sid = created["stream_id"]
    Publisher(api, account, sid, publisher_key).publish("price", b"{}")  # head 1, so a page of sequence 1 fits
    paid = PaidPublisher(api, account, sid, publisher_key, KeyManagerClient(url), key_epoch=5,
                         config=_paid_publisher(account, url).config)
    body = {k: v for k, v in paid.publish_command(1, 1, "price", b"secret", None, "application/json").body.items()
            if k != "keymgr_receipt"}
    honest = StreamMessage.from_json_dict(body).to_json_dict()
    envelope = bytearray(bytes.fromhex(honest["payload_inline_hex"]))
    envelope[-1] ^= 1  # a flipped tag bit: the signature no longer covers this payload
    api.page = [{**honest, "payload_inline_hex": envelope.hex()}]
    reader = Subscriber(api, sid, decrypt=True, epoch_keys=EpochKeyRing(KeyManagerClient(url), account))
    with pytest.raises(WatchtowerError) as refused:
        reader.poll_page(10)
    assert refused.value.code == "INVALID_SIGNATURE"
    assert not [p for p, _ in service.requests if p == "/v1/keymgr/epoch-keys"]  # no key was asked for it
    assert reader.cursor == 0
    api.page = [honest]
    assert reader.poll_page(10).plaintexts == (b"secret",)
