"""Paid feeds from the CLI against a real stack: broker, stream worker, API and the Stream Key Manager.

One story, in order (the tests share the module's stack and home): a publisher creates a paid feed
and publishes through stream_encrypt; a reader buys epochs and decrypts; `cby balance --json` shows
the fee split; a non-paying subscriber sees ciphertext and gets ENTITLEMENT_REQUIRED for keys; a
sponsor pays for a friend and gets no key itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from click.testing import CliRunner, Result
from conftest import TEST_PROTOCOL_TREASURY
from kafka_fixture import free_ports
from stack_fixture import start_stack
from waiting import wait_until

from watchtower.cli.main import _register, cli
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE, Account, write_key_file
from watchtower.client.http import ApiClient
from watchtower.client.keymgr import KeyManagerClient
from watchtower.client.paid import current_key_epoch, paid_config
from watchtower.keymgr.kek import Kek, new_kek_text
from watchtower.protocol.confidential.envelope import envelope_aad
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.stream.message import StreamMessage

pytestmark = pytest.mark.integration

FEE, BPS = 1_000, 500  # 5 %: 50 of every 1,000
EPOCH_BLOCKS = 86_400  # day-long epochs: the story never straddles an epoch boundary by accident
MINTER = nacl.signing.SigningKey(b"\x51" * 32)
STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def paid_stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs, home = tmp_path_factory.mktemp("paid-logs"), tmp_path_factory.mktemp("paid-home")
    kek_file = logs / "kek.key"
    kek_file.write_text(new_kek_text())
    kek_file.chmod(0o600)
    kek = Kek(bytes.fromhex(kek_file.read_text()))
    minter = Account(MINTER, home=home)
    write_key_file(home / "genesis" / "minter.key", MINTER)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WATCHTOWER_KEYMGR_PUBLIC_KEY", kek.receipt_public_key().hex())
        env.setenv("WATCHTOWER_CBY_MINTER", minter.address)
        with start_stack(kafka_bootstrap, logs) as services:
            services.start_keymgr(free_ports(1)[0], kek_file)
            services.wait_keymgr()
            env.setenv("WATCHTOWER_HOME", str(home))
            env.setenv("WATCHTOWER_API", services.api_url)
            env.setenv("WATCHTOWER_KEYMGR", services.keymgr_url)
            env.delenv(ENV_ACCOUNT, raising=False)
            env.delenv(ENV_KEY_FILE, raising=False)
            _register()
            yield {"services": services, "home": home}


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def refused(code: str, *args: str) -> WatchtowerError:
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, WatchtowerError), result.output
    assert result.exception.code == code, result.exception.message
    return result.exception


def eventually(call: Callable[[], Any], timeout_s: float = 30.0, retry: tuple[str, ...] = ()) -> Any:
    """`call()` once the read side (or the key manager) has caught up with an acknowledged write: an
    AssertionError, or a refusal whose code is in `retry`, means not yet; any other refusal fails at once."""
    refusal: WatchtowerError | None = None

    def attempt() -> tuple[Any] | None:
        nonlocal refusal
        try:
            return (call(),)
        except WatchtowerError as err:
            if err.code not in retry:
                raise
            refusal = err
            return None

    return wait_until(lambda: f"the read side to catch up with an acknowledged write (last refusal: {refusal!r})",
                      attempt, timeout_s=timeout_s, every_s=0.2, retry_on=(AssertionError,))[0]


def balances(*who: str) -> dict[str, int]:
    rows = run_json("cby", "balance", *who)
    rows = rows.get("balances", [rows])
    return {r["account"]: r["balance_cby"] for r in rows}


@pytest.mark.secure
def test_a_paid_feed_is_published_encrypted_through_the_key_manager(paid_stack: dict[str, Any]) -> None:
    for name in ("publisher", "reader", "stranger", "sponsor", "friend"):
        STATE[name] = run_json("account", "new", name)["address"]
    created = run_json("new", "feed", "--account", "publisher", "--name", "signals", "--paid",
                       "--fee-per-epoch-cby", str(FEE), "--protocol-fee-bps", str(BPS),
                       "--key-epoch-blocks", str(EPOCH_BLOCKS), "--min-purchase-epochs", "1",
                       "--content-cipher", "XCHACHA20_POLY1305", "--key-scope", "ACCOUNT")
    feed = STATE["feed"] = str(created["feed_id"])
    info = ApiClient().stream_info(created["stream_id"])
    STATE["epoch"] = current_key_epoch(paid_config(info))
    for n in (1, 2):
        eventually(lambda n=n: run_json("feed", feed, "publish", "--account", "publisher", "--kind", "signal",
                                        "--data", json.dumps({"side": "buy", "n": n})),
                   retry=("NOT_PLATFORM_MANAGED_STREAM", "STREAM_NOT_FOUND", "NOT_READY"))
    page = eventually(lambda: _page(run_json("feed", feed, "get-since", "--cursor", "0"), 2))
    assert {m["payload_format"] for m in page["messages"]} == {"CIPHERTEXT"}
    assert all(b"buy" not in bytes.fromhex(m["payload_inline_hex"]) for m in page["messages"])
    assert {m["key_epoch"] for m in page["messages"]} == {STATE["epoch"]}


def _page(page: dict[str, Any], count: int) -> dict[str, Any]:
    assert len(page["messages"]) == count
    return page


@pytest.mark.secure
def test_a_purchase_splits_the_fee_between_the_treasuries(paid_stack: dict[str, Any]) -> None:
    reader, publisher, feed, epoch = STATE["reader"], STATE["publisher"], STATE["feed"], STATE["epoch"]
    run("cby", "mint", reader, "10000")
    run("cby", "mint", STATE["sponsor"], "10000")
    eventually(lambda: _equal(balances("reader")[reader], 10_000))
    for name in ("reader", "stranger", "sponsor"):
        key = run_json("account", "keys", "add", "--account", name)
        assert Path(key["private_key_file"]).stat().st_mode & 0o777 == 0o600
    before = balances("reader", "publisher", TEST_PROTOCOL_TREASURY)
    receipt = run_json("feed", feed, "acquire-access", "--account", "reader", "--until-epoch", str(epoch + 1))
    assert receipt == {"stream_id": receipt["stream_id"], "beneficiary_account": reader, "payer_account": reader,
                       "from_key_epoch": epoch, "to_key_epoch": epoch + 1, "epochs_charged": 2,
                       "publisher_amount_cby": 2 * FEE, "protocol_fee_cby": 2 * FEE * BPS // 10_000,
                       "total_amount_cby": 2 * FEE + 2 * FEE * BPS // 10_000}
    expected = {reader: before[reader] - 2_100, publisher: before[publisher] + 2_000,
                TEST_PROTOCOL_TREASURY: before[TEST_PROTOCOL_TREASURY] + 100}
    eventually(lambda: _equal(balances("reader", "publisher", TEST_PROTOCOL_TREASURY), expected))
    again = run_json("feed", feed, "acquire-access", "--account", "reader", "--until-epoch", str(epoch))
    assert (again["epochs_charged"], again["total_amount_cby"]) == (0, 0)  # idempotent, nothing charged


def _equal(got: Any, expected: Any) -> None:
    assert got == expected


@pytest.mark.secure
def test_the_entitled_reader_decrypts_with_get_since(paid_stack: dict[str, Any]) -> None:
    feed = STATE["feed"]
    page = eventually(lambda: run_json("feed", feed, "get-since", "--cursor", "0", "--decrypt", "--account", "reader"),
                      retry=("ENTITLEMENT_REQUIRED",))
    assert [json.loads(m["plaintext"]) for m in page["messages"]] == [{"side": "buy", "n": 1}, {"side": "buy", "n": 2}]
    fetched = run_json("feed", feed, "fetch-keys", "--account", "reader")
    assert fetched["key_epochs"] == [STATE["epoch"], STATE["epoch"] + 1]
    sealed = Path(fetched["sealed_keys_file"]).read_text()
    assert "sealed_key_hex" in sealed


def test_the_public_clis_command_lines_buy_fetch_and_consume(paid_stack: dict[str, Any]) -> None:
    """shared/spec/cowboy-watchtower-cli.md, as written (failed before: unknown commands and options)."""
    feed, epoch = STATE["feed"], STATE["epoch"]
    keys = run_json("account", "list-keys", "--account", "reader")["keys"]
    key_id = str(next(k["account_key_id"] for k in keys if k["status"] == "ACTIVE"))
    receipt = run_json("feed", feed, "acquire-access", "--account", "reader", "--to-epoch", str(epoch + 1),
                       "--account-key-id", key_id)
    assert receipt["epochs_charged"] == 0  # already bought: idempotent
    hinted = CliRunner().invoke(cli, ["feed", feed, "acquire-access", "--account", "reader", "--to-epoch",
                                      str(epoch + 1), "--account-key-id", "7", "--json"])
    assert hinted.exit_code == 0, hinted.output  # a hint only (CIP-7): the purchase stands, with a warning
    assert "warning" in hinted.stderr
    assert "no ACTIVE account key 7" in hinted.stderr
    fetched = run_json("feed", feed, "fetch-keys", "--account", "reader", "--account-key-id", key_id,
                       "--epochs", f"{epoch},{epoch + 1}")
    assert fetched["key_epochs"] == [epoch, epoch + 1]
    page = run_json("feed", feed, "consume", "--account", "reader", "--account-key-id", key_id, "--cursor", "0",
                    "--limit", "10")
    assert [json.loads(m["plaintext"]) for m in page["messages"]] == [{"side": "buy", "n": 1}, {"side": "buy", "n": 2}]
    # Sealed ahead: all already here; the daemon's step stays within the entitlement (epoch + 1).
    wrapped = run_json("feed", feed, "pre-wrap-epochs", "--account", "reader", "--from", str(epoch),
                       "--to", str(epoch + 1))
    assert (wrapped["fetched"], wrapped["already"]) == ([], [epoch, epoch + 1])
    shutil.rmtree(paid_stack["home"] / "epoch-keys")
    ahead = run_json("feed", feed, "wrap-daemon", "--account", "reader", "--depth", "5", "--once")
    assert ahead["fetched"] == [epoch, epoch + 1]
    again = run_json("feed", feed, "wrap-daemon", "--account", "reader", "--depth", "5", "--once")
    assert (again["fetched"], again["already"]) == ([], [epoch, epoch + 1])
    assert run_json("feed", feed, "rewrap-epochs", "--account", "reader")["fetched"] == []  # one key: nothing to do


def test_an_accounts_own_actor_decrypts_every_feed_without_a_grant_per_feed(paid_stack: dict[str, Any]) -> None:
    """CIP-7: the account's own actors (created by it) are authorized unless revoked (failed before: an actor
    `new-actor` created was refused until a grant)."""
    feed = STATE["feed"]
    run_json("account", "new-actor", "own-bot", "--account", "reader")  # records the creation: no grant
    as_bot = ("--key-file", str(paid_stack["home"] / "actors" / "own-bot.key"), "--for-account", "reader")
    shutil.rmtree(paid_stack["home"] / "epoch-keys")  # the keys must come from the key manager, for the actor
    page = eventually(lambda: run_json("feed", feed, "consume", "--cursor", "0", *as_bot),
                      retry=("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT",))
    assert [json.loads(m["plaintext"])["n"] for m in page["messages"]] == [1, 2]
    run_json("account", "actors", "revoke", "own-bot", "--feed", feed, "--account", "reader")  # taken back
    shutil.rmtree(paid_stack["home"] / "epoch-keys")
    eventually(lambda: refused("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT", "feed", feed, "consume", "--cursor", "0",
                               *as_bot), retry=())
    # An actor created with --local is not recorded: refused until the account grants it.
    run_json("account", "new-actor", "local-bot", "--local", "--account", "reader")
    as_local = ("--key-file", str(paid_stack["home"] / "actors" / "local-bot.key"), "--for-account", "reader")
    refused("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT", "feed", feed, "consume", "--cursor", "0", *as_local)
    run_json("account", "actors", "authorize", "local-bot", "--all-streams", "--account", "reader")
    page = eventually(lambda: run_json("feed", feed, "consume", "--cursor", "0", *as_local),
                      retry=("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT",))
    assert [json.loads(m["plaintext"])["n"] for m in page["messages"]] == [1, 2]
    refused("UNAUTHORIZED", "account", "actors", "authorize", "0x" + "ab" * 32, "--feed", feed, "--account",
            "reader")  # an actor that cannot exist


def test_the_key_manager_also_decrypts_one_message_for_the_entitled_account_only(paid_stack: dict[str, Any]) -> None:
    api, keymgr = ApiClient(), KeyManagerClient()
    stream_id = api.feed(int(STATE["feed"]))["stream_id"]
    msg = StreamMessage.from_json_dict(api.get_since(stream_id, 0, 1)["messages"][0])
    aad = envelope_aad(stream_id=stream_id, sequence=msg.sequence, key_epoch=msg.key_epoch, kind=msg.kind,
                       content_type=msg.content_type)
    reader, stranger = Account.load("reader"), Account.load("stranger")
    plain = keymgr.decrypt(reader, stream_id, beneficiary_account=reader.address, key_epoch=msg.key_epoch, aad=aad,
                           envelope=msg.payload_inline)
    assert json.loads(plain) == {"side": "buy", "n": 1}
    with pytest.raises(WatchtowerError) as refused_here:
        keymgr.decrypt(stranger, stream_id, beneficiary_account=stranger.address, key_epoch=msg.key_epoch, aad=aad,
                       envelope=msg.payload_inline)
    assert refused_here.value.code == "ENTITLEMENT_REQUIRED"
    with pytest.raises(WatchtowerError) as borrowed:  # naming the reader does not lend a stranger its entitlement
        keymgr.decrypt(stranger, stream_id, beneficiary_account=reader.address, key_epoch=msg.key_epoch, aad=aad,
                       envelope=msg.payload_inline)
    assert borrowed.value.code == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"


def test_a_subscriber_who_did_not_pay_sees_ciphertext_but_gets_no_key(paid_stack: dict[str, Any]) -> None:
    feed = STATE["feed"]
    plain = run_json("feed", feed, "get-since", "--cursor", "0", "--account", "stranger")
    assert {m["payload_format"] for m in plain["messages"]} == {"CIPHERTEXT"}
    err = refused("ENTITLEMENT_REQUIRED", "feed", feed, "get-since", "--cursor", "0", "--decrypt",
                  "--account", "stranger")
    assert "acquire_epoch_access" in err.message
    refused("ENTITLEMENT_REQUIRED", "feed", feed, "fetch-keys", "--account", "stranger",
            "--until-epoch", str(STATE["epoch"]))


def test_a_sponsor_pays_for_a_friend_and_gets_no_key(paid_stack: dict[str, Any]) -> None:
    feed, epoch, friend = STATE["feed"], STATE["epoch"], STATE["friend"]
    receipt = run_json("feed", feed, "acquire-access", "--account", "sponsor", "--until-epoch", str(epoch),
                       "--beneficiary", "friend")
    assert (receipt["beneficiary_account"], receipt["payer_account"]) == (friend, STATE["sponsor"])
    assert receipt["total_amount_cby"] == FEE + FEE * BPS // 10_000
    eventually(lambda: _equal(balances("sponsor")[STATE["sponsor"]], 10_000 - receipt["total_amount_cby"]))
    refused("ENTITLEMENT_REQUIRED", "feed", feed, "fetch-keys", "--account", "sponsor", "--until-epoch", str(epoch))
    refused("ENTITLEMENT_REQUIRED", "feed", feed, "get-since", "--cursor", "0", "--decrypt", "--account", "sponsor")


def test_account_keys_are_listed_with_where_their_private_half_is_and_can_be_revoked(
        paid_stack: dict[str, Any]) -> None:
    listed = eventually(lambda: _one_key(run_json("account", "keys", "list", "--account", "stranger")))
    assert listed["account"] == STATE["stranger"]
    second = run_json("account", "keys", "add", "--account", "stranger")["account_key_id"]
    run_json("account", "keys", "revoke", str(second), "--account", "stranger")
    keys = eventually(lambda: _statuses(run_json("account", "keys", "list", "--account", "stranger"),
                                        {1: "ACTIVE", second: "REVOKED"}))
    assert all(k["private_key_here"] for k in keys)
    other = run_json("account", "keys", "list", "--address", STATE["stranger"])
    assert [k["private_key_here"] for k in other["keys"]] == [False, False]  # nobody's key file is looked up


def _one_key(listing: dict[str, Any]) -> dict[str, Any]:
    assert [(k["account_key_id"], k["status"], k["scheme"]) for k in listing["keys"]] == [(1, "ACTIVE", "X25519")]
    assert listing["keys"][0]["private_key_here"] is True
    return listing


def _statuses(listing: dict[str, Any], expected: dict[int, str]) -> list[dict[str, Any]]:
    assert {k["account_key_id"]: k["status"] for k in listing["keys"]} == expected
    return list(listing["keys"])


def test_an_authorized_actor_decrypts_for_its_account_until_revoked(paid_stack: dict[str, Any]) -> None:
    feed = STATE["feed"]
    run_json("account", "new-actor", "bot", "--local", "--account", "reader")
    actor_key = str(paid_stack["home"] / "actors" / "bot.key")
    as_bot = ("--key-file", actor_key, "--for-account", "reader")
    # The actor's machine holds the account key but none of the epoch keys the reader fetched here.
    shutil.rmtree(paid_stack["home"] / "epoch-keys")
    refused("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT", "feed", feed, "get-since", "--cursor", "0", "--decrypt", *as_bot)
    run_json("account", "actors", "authorize", "bot", "--feed", feed, "--account", "reader")
    page = eventually(lambda: run_json("feed", feed, "get-since", "--cursor", "0", "--decrypt", *as_bot),
                      retry=("ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT",))
    assert [json.loads(m["plaintext"])["n"] for m in page["messages"]] == [1, 2]
    run_json("account", "actors", "revoke", "bot", "--feed", feed, "--account", "reader")
    shutil.rmtree(paid_stack["home"] / "epoch-keys")
    # A revocation takes effect from the next block: until then the grant may still answer.

    def refused_keys() -> Result | None:
        result = CliRunner().invoke(cli, ["feed", feed, "fetch-keys", "--json", *as_bot])
        return result if isinstance(result.exception, WatchtowerError) else None

    result = wait_until("fetch-keys to be refused", refused_keys, timeout_s=30, every_s=0.2)
    assert isinstance(result.exception, WatchtowerError), result.output
    assert result.exception.code == "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"


def test_renew_needs_a_subscription_and_then_extends_the_entitlement(paid_stack: dict[str, Any]) -> None:
    feed, epoch = STATE["feed"], STATE["epoch"]
    refused("PAYMENT_REQUIRED", "feed", feed, "renew", "--account", "stranger")
    run_json("feed", feed, "subscribe", "--mode", "pull", "--account", "reader")
    receipt = run_json("feed", feed, "renew", "--account", "reader")
    assert (receipt["from_key_epoch"], receipt["to_key_epoch"], receipt["epochs_charged"]) == (epoch + 2, epoch + 2, 1)
    assert receipt["total_amount_cby"] == FEE + FEE * BPS // 10_000


def test_every_paid_read_answers_json_from_the_projections(paid_stack: dict[str, Any]) -> None:
    feed, epoch = STATE["feed"], STATE["epoch"]

    def entitlement(*who: str) -> Any:
        return run_json("feed", feed, "entitlement", *who)["active_until_key_epoch"]

    eventually(lambda: _equal(entitlement("--account", "reader"), epoch + 2))
    assert entitlement("--beneficiary", "friend") == epoch
    assert entitlement("--beneficiary", "sponsor") is None  # the sponsor paid, the friend is entitled
    terms = run_json("feed", feed, "entitlement", "--account", "stranger")
    assert terms["current_key_epoch"] == epoch
    assert terms["paid_stream_config"]["protocol_treasury"] == TEST_PROTOCOL_TREASURY
    info = run_json("account", "info", "reader")
    assert info["balance_cby"] == 10_000 - 2_100 - 1_050
    # own-bot (created: every stream, "") revoked on the feed; local-bot's all-streams grant; bot's grant, revoked
    assert sorted((a["stream_id"], a["status"]) for a in info["authorizations"]) == [
        ("", "ACTIVE"), ("", "ACTIVE"), (terms["stream_id"], "REVOKED"), (terms["stream_id"], "REVOKED")]
    supply = eventually(lambda: _supply(run_json("cby", "supply"), 20_000), retry=("NOT_READY",))
    assert supply["sum_of_balances_cby"] == supply["total_supply_cby"]
    assert run_json("cby", "digest")


def _supply(supply: dict[str, Any], minted: int) -> dict[str, Any]:
    assert supply["total_supply_cby"] == minted
    return supply


def test_cby_moves_by_transfer_and_burn_and_only_the_minter_mints(paid_stack: dict[str, Any]) -> None:
    reader, stranger = STATE["reader"], STATE["stranger"]
    before = balances("reader", "stranger")
    run_json("cby", "transfer", "stranger", "300", "--memo", "thanks", "--account", "reader")
    run_json("cby", "burn", "100", "--account", "stranger")
    eventually(lambda: _equal(balances("reader", "stranger"),
                              {reader: before[reader] - 300, stranger: before[stranger] + 200}))
    eventually(lambda: _supply(run_json("cby", "supply"), 20_000 - 100), retry=("NOT_READY",))
    err = refused("UNAUTHORIZED", "cby", "mint", "reader", "5", "--account", "reader")
    assert "minter" in err.message
    refused("INSUFFICIENT_CBY_BALANCE", "cby", "transfer", "reader", "1000000", "--account", "stranger")

def test_acquire_access_checks_the_feed_first_and_a_keyless_sponsor_pays_for_itself(
        paid_stack: dict[str, Any]) -> None:
    """CIP-7 purchase step 1 first; account_key_id a hint (failed before: INVALID_ACCOUNT_KEY both times)."""
    open_feed = str(run_json("new", "feed", "--account", "publisher", "--name", "open-signals")["feed_id"])
    # "friend" registered no account key: the open feed is named first, whatever the key hint says
    eventually(lambda: refused("NOT_PLATFORM_MANAGED_STREAM", "feed", open_feed, "acquire-access", "--account",
                               "friend", "--to-epoch", str(STATE["epoch"]), "--account-key-id", "1"))
    run("cby", "mint", STATE["friend"], str(2 * FEE))
    eventually(lambda: _equal(balances("friend")[STATE["friend"]], 2 * FEE))
    result = CliRunner().invoke(cli, ["feed", STATE["feed"], "acquire-access", "--account", "friend", "--to-epoch",
                                      str(STATE["epoch"] + 1), "--account-key-id", "1", "--payer", "SELF", "--json"])
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout)
    assert (receipt["payer_account"], receipt["beneficiary_account"]) == (STATE["friend"], STATE["friend"])
    assert receipt["epochs_charged"] == 1
    assert "no ACTIVE account key 1" in result.stderr


def test_a_spender_pays_from_an_allowance_until_its_cap_and_not_after_revocation(paid_stack: dict[str, Any]) -> None:
    """CIP-7 delegated spending authority (failed before: any payer other than the signer was UNAUTHORIZED)."""
    feed, epoch, reader, stranger = STATE["feed"], STATE["epoch"], STATE["reader"], STATE["stranger"]
    price = FEE + FEE * BPS // 10_000
    refused("UNAUTHORIZED", "feed", feed, "acquire-access", "--account", "stranger", "--payer", "reader",
            "--to-epoch", str(epoch))
    granted = run_json("account", "allowance", "approve", "stranger", "--cap-cby", str(price), "--feed", feed,
                       "--account", "reader")
    assert (granted["spender"], granted["cap_cby"]) == (stranger, str(price))
    before = balances("reader")[reader]
    receipt = run_json("feed", feed, "acquire-access", "--account", "stranger", "--payer", "reader",
                       "--to-epoch", str(epoch))
    assert (receipt["payer_account"], receipt["beneficiary_account"]) == (reader, stranger)
    eventually(lambda: _equal(balances("reader")[reader], before - price))
    past = refused("UNAUTHORIZED", "feed", feed, "acquire-access", "--account", "stranger", "--payer", "reader",
                   "--to-epoch", str(epoch + 1))
    assert past.details["remaining_cby"] == "0"
    run_json("account", "allowance", "approve", "stranger", "--cap-cby", str(10 * price), "--account", "reader")
    run_json("account", "allowance", "revoke", "stranger", "--account", "reader")  # the any-feed one
    refused("UNAUTHORIZED", "feed", feed, "acquire-access", "--account", "stranger", "--payer", "reader",
            "--to-epoch", str(epoch + 1))
    refused("UNAUTHORIZED", "account", "allowance", "revoke", "stranger", "--account", "reader")
    assert balances("reader")[reader] == before - price


# --- the public CLI's command lines, as a script (issue 21, "must show") -----------------------------

SMOKE_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "public_cli_smoke.sh"


def test_the_public_cli_smoke_script_runs_against_the_stack(paid_stack: dict[str, Any], tmp_path: Path) -> None:
    """scripts/public_cli_smoke.sh, written only against the public `cowboy watchtower` CLI's lines,
    runs as its own processes against this module's stack and key manager. Its publisher and reader
    live in two fresh homes (their `default` accounts: the public CLI's key auto-discovery); the
    reader is funded by the genesis minter first. Last in the module: it mints, which moves the
    supply the story above counts."""
    homes = {}
    for role in ("publisher", "reader"):
        homes[role] = tmp_path / role
        write_key_file(homes[role] / "accounts" / "default.key", nacl.signing.SigningKey.generate())
    reader = Account.load("default", home=homes["reader"]).address
    run("cby", "mint", reader, "3000")
    eventually(lambda: _equal(balances(reader)[reader], 3_000))
    env = {**os.environ, "PUBLISHER_HOME": str(homes["publisher"]), "READER_HOME": str(homes["reader"]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(SMOKE_SCRIPT)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.strip().endswith("public CLI smoke: ok"), done.stdout
    eventually(lambda: _equal(balances(reader)[reader], 3_000 - 2_100))  # two epochs and the fee, charged once
