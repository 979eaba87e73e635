"""Paid feeds from the command line: ``feed ID acquire-access | renew | fetch-keys``.

``feed ID publish`` on a paid feed encrypts through the key manager and ``feed ID get-since
--decrypt`` opens what it reads with the account's epoch keys; both live in `feed_cmd` and call
the helpers here. The key manager is found by ``--keymgr``, ``$WATCHTOWER_KEYMGR`` or the
``keymgr_url`` `watchtower up` recorded. Epoch keys are never printed: ``fetch-keys`` reports which
epochs it holds, and keeps them sealed to the account's X25519 key on disk (sealing them ahead
of time, ``pre-wrap-epochs`` and the rest, is `epoch_wrap_cmd`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from watchtower.cli.account_cmd import load_account
from watchtower.cli.feed_group import FeedRef, feed, pass_feed, read_options, write_options
from watchtower.cli.json_output import echo_json
from watchtower.cli.ledger_cmd import address_of
from watchtower.client.account import Account
from watchtower.client.account_keys import sealed_keys_path
from watchtower.client.http import ApiClient
from watchtower.client.keymgr import DEFAULT_KEYMGR_URL, ENV_KEYMGR, KeyManagerClient
from watchtower.client.ledger import Ledger
from watchtower.client.paid import EpochKeyRing, current_key_epoch, paid_config
from watchtower.client.stream_api import with_spec_names
from watchtower.client.subscriber import Page, Subscriber
from watchtower.protocol.errors import EntitlementRequiredError, InvalidAccountKeyError
from watchtower.protocol.ledger.billing import KeyAccessReceipt
from watchtower.protocol.stream.message import StreamMessage

F = TypeVar("F", bound=Callable[..., Any])


def keymgr_option(func: F) -> F:
    """Add ``--keymgr URL`` (received as `keymgr_url`)."""
    return click.option("--keymgr", "keymgr_url", default=None, metavar="URL",
                        help=f"Stream Key Manager [env {ENV_KEYMGR}; default {DEFAULT_KEYMGR_URL}].")(func)


def is_paid(api: ApiClient, stream_id: str) -> bool:
    """True for a PLATFORM_MANAGED stream (messages are CIPHERTEXT)."""
    config = api.stream_info(stream_id).get("config") or {}
    return config.get("access_mode") in ("PLATFORM_MANAGED", "SUBSCRIBER_PAID")


def plaintext_field(plain: bytes) -> dict[str, str]:
    """A plaintext for JSON: ``{"plaintext": text}`` when it is UTF-8, else ``{"plaintext_hex": hex}``."""
    try:
        return {"plaintext": plain.decode("utf-8")}
    except UnicodeDecodeError:
        return {"plaintext_hex": plain.hex()}


def decrypted_line(msg: StreamMessage, plain: bytes) -> str:
    """One readable line of a decrypted message."""
    text = plaintext_field(plain).get("plaintext")
    shown = text if text is not None and text.isprintable() else f"<{len(plain)} bytes>"
    return f"#{msg.sequence}  {msg.kind}  epoch {msg.key_epoch}  {shown[:100]}"


def echo_decrypted_page(page: Page, as_json: bool) -> None:
    """Print a decrypted `get-since` page: each message with its plaintext (JSON), or one line each."""
    if as_json:
        echo_json(with_spec_names({
            "stream_id": page.stream_id, "head_sequence": page.head_sequence, "floor_sequence": page.floor_sequence,
            "next_cursor": page.next_cursor, "verified": True, "decrypted": True,
            "messages": [{**m.to_json_dict(), **plaintext_field(p)}
                         for m, p in zip(page.messages, page.plaintexts, strict=True)]}))
        return
    for msg, plain in zip(page.messages, page.plaintexts, strict=True):
        click.echo(decrypted_line(msg, plain))
    click.echo(f"{len(page.messages)} verified and decrypted message(s); next cursor {page.next_cursor}")


def _receipt_text(receipt: KeyAccessReceipt) -> str:
    if receipt.epochs_charged == 0:
        return (f"already entitled through epoch {receipt.to_key_epoch}: nothing charged "
                f"(beneficiary {receipt.beneficiary_account})")
    return (f"epochs {receipt.from_key_epoch}..{receipt.to_key_epoch} bought for {receipt.beneficiary_account}: "
            f"{receipt.total_amount_cby} CBY wei paid by {receipt.payer_account} = {receipt.publisher_amount_cby} to "
            f"the publisher treasury + {receipt.protocol_fee_cby} protocol fee")


SELF = "SELF"
"""What --payer and --beneficiary accept for the signer itself (the public CLI's ``--payer SELF``)."""


def party(text: str | None, signer: Account, what: str) -> str | None:
    """An --payer / --beneficiary value as an address: SELF (any case) is the signer; None stays None."""
    if text is None:
        return None
    return signer.address if text.upper() == SELF else address_of(text, what)


@feed.command("acquire-access")
@click.option("--until-epoch", "--to-epoch", "until_epoch", type=click.IntRange(min=0), required=True,
              help="Last key epoch to be entitled to (--to-epoch: the public CLI's name).")
@click.option("--beneficiary", default=None, metavar="ACCOUNT", help="Who gets the access (default: you; SELF).")
@click.option("--payer", default=None, metavar="ACCOUNT",
              help="Who pays (default: you; SELF): you, or an account that gave you an allowance "
                   "(`account allowance approve`).")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None,
              help="The beneficiary's account key the epoch keys are to be sealed to: a hint only, as in CIP-7; "
                   "the purchase never depends on it (a warning says when it is not an ACTIVE key).")
@write_options
@pass_feed
def feed_acquire_access(ref: FeedRef, until_epoch: int, beneficiary: str | None, payer: str | None,
                        account_key_id: int | None, api_url: str | None, account: str | None, key_file: Path | None,
                        as_json: bool) -> None:
    """Buy key epochs of a paid feed up to --until-epoch; prints the KeyAccessReceipt.

    A sponsor paying for another --beneficiary gets no access itself. A repeat within the
    entitlement charges nothing. An OPEN feed answers NOT_PLATFORM_MANAGED_STREAM (CIP-7 step 1),
    whatever the other options say.
    """
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    signer = load_account(account, key_file)
    receipt = Ledger(api, signer).acquire_epoch_access(
        stream_id, until_epoch, beneficiary_account=party(beneficiary, signer, "--beneficiary"),
        payer_account=party(payer, signer, "--payer"))
    if account_key_id is not None:
        _warn_unless_active_key(api, receipt.beneficiary_account, account_key_id)
    if as_json:
        echo_json(receipt.to_dict())
        return
    click.echo(_receipt_text(receipt))


def _warn_unless_active_key(api: ApiClient, address: str, account_key_id: int) -> None:
    """The --account-key-id hint, checked after the purchase: a warning (stderr) when it names no ACTIVE key."""
    try:
        _require_active_key(api, address, account_key_id)
    except InvalidAccountKeyError as err:
        click.echo(f"warning: {err.message}; the purchase stands, but epoch keys are sealed only to an ACTIVE "
                   "key (`watchtower account keys add --account NAME` registers one)", err=True)


@feed.command("renew")
@click.option("--until-epoch", type=click.IntRange(min=0), default=None,
              help="Last key epoch to be entitled to (default: the feed's minimum purchase past the entitlement).")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None, help="Seal keys to this account key.")
@write_options
@pass_feed
def feed_renew(ref: FeedRef, until_epoch: int | None, account_key_id: int | None, api_url: str | None,
               account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Renew your subscription to a paid feed (PAYMENT_REQUIRED without an active subscription)."""
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    ledger = Ledger(api, load_account(account, key_file))
    if until_epoch is None:
        config = paid_config({"stream_id": stream_id, **api.stream_info(stream_id)})
        current = current_key_epoch(config)
        covered = max(ledger.active_until(stream_id) or current - 1, current - 1)
        until_epoch = covered + config.min_purchase_epochs
    receipt = ledger.renew_subscription(stream_id, until_epoch, account_key_id=account_key_id)
    if as_json:
        echo_json(receipt.to_dict())
        return
    click.echo(_receipt_text(receipt))


def _require_active_key(api: ApiClient, address: str, account_key_id: int) -> None:
    """INVALID_ACCOUNT_KEY unless `account_key_id` is an ACTIVE key of `address`."""
    keys = api.account_info(address).get("keys", [])
    if not any(k.get("account_key_id") == account_key_id and k.get("status") == "ACTIVE" for k in keys):
        raise InvalidAccountKeyError(f"{address} has no ACTIVE account key {account_key_id}; "
                                     "`watchtower account list-keys` lists them",
                                     details={"account_key_id": account_key_id})


def parse_epochs(text: str) -> list[int]:
    """``--epochs``: "3,4,9" or "3-6" (or both, "3-5,9"), as a sorted list without repeats."""
    epochs: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            lo, hi = int(first), int(last or first)
            if lo < 0 or hi < lo or hi - lo > 10_000:
                raise ValueError
            epochs.update(range(lo, hi + 1))
    except ValueError:
        raise click.BadParameter(f"{text!r}: epochs as 3,4,9 or 3-6", param_hint="--epochs") from None
    return sorted(epochs)


def for_account_option(func: F) -> F:
    """Add ``--for-account NAME`` (received as `for_account`)."""
    return click.option("--for-account", "for_account", default=None, metavar="NAME",
                        help="Use this saved account's entitlement and account key; you sign as its authorized "
                             "actor (default: your own account).")(func)


def epoch_key_ring(api: ApiClient, keymgr_url: str | None, signer: Account, for_account: str | None = None,
                   account_key_id: int | None = None) -> EpochKeyRing:
    """The epoch keys of `for_account` (default: `signer` itself), fetched by `signer`, through the
    key manager at `keymgr_url`, sealed to `account_key_id` (default: the holder's ACTIVE key). An
    actor signing for its account must be authorized for the feed. A key kept on this machine is
    opened only while `api` shows the account key it is sealed to ACTIVE (KEY_REVOKED otherwise)."""
    holder = Account.load(for_account) if for_account else signer
    return EpochKeyRing(KeyManagerClient(keymgr_url), holder, caller=signer, account_key_id=account_key_id,
                        accounts=api)


@feed.command("fetch-keys")
@click.option("--from-epoch", type=click.IntRange(min=0), default=None, help="First epoch (default: the current).")
@click.option("--until-epoch", "--to-epoch", "until_epoch", type=click.IntRange(min=0), default=None,
              help="Last epoch (default: the end of your entitlement).")
@click.option("--epochs", "epochs_text", default=None, metavar="LIST",
              help="Exactly these epochs: 3,4,9 or 3-6 (the public CLI's form; instead of --from/--until-epoch).")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None,
              help="Seal the keys to this account key (default: your ACTIVE one).")
@for_account_option
@keymgr_option
@write_options
@pass_feed
def feed_fetch_keys(ref: FeedRef, from_epoch: int | None, until_epoch: int | None, epochs_text: str | None,
                    account_key_id: int | None, for_account: str | None, keymgr_url: str | None,
                    api_url: str | None, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Fetch your epoch keys of a paid feed, sealed to your account key, and keep them for --decrypt.

    ENTITLEMENT_REQUIRED for an epoch you have not bought (a sponsor of someone else gets none);
    ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT for an actor fetching --for-account without a grant.
    """
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account, account_key_id)
    holder = ring.holder
    if epochs_text is not None:
        if from_epoch is not None or until_epoch is not None:
            raise click.UsageError("--epochs names the epochs itself; drop --from-epoch/--until-epoch")
        fetched = [e for epoch in parse_epochs(epochs_text) for e in ring.fetch(stream_id, epoch, epoch)]
        _echo_fetched(stream_id, holder, fetched, as_json)
        return
    config = paid_config({"stream_id": stream_id, **api.stream_info(stream_id)})
    first = current_key_epoch(config) if from_epoch is None else from_epoch
    last = until_epoch
    if last is None:
        last = Ledger(api, holder).active_until(stream_id)
        if last is None:
            raise EntitlementRequiredError(f"{holder.address} holds no entitlement to {stream_id}; buy epochs with "
                                           f"`watchtower feed {ref.ref} acquire-access --until-epoch N` first")
    _echo_fetched(stream_id, holder, ring.fetch(stream_id, first, max(first, last)), as_json)


def _echo_fetched(stream_id: str, holder: Account, epochs: list[int], as_json: bool) -> None:
    answer = {"stream_id": stream_id, "account": holder.address, "key_epochs": epochs,
              "sealed_keys_file": str(sealed_keys_path(holder, stream_id))}
    if as_json:
        echo_json(answer)
        return
    click.echo(f"{len(epochs)} epoch key(s) ({epochs[0]}..{epochs[-1]}) fetched sealed to your account key and "
               f"kept at {answer['sealed_keys_file']}" if epochs else "no epoch keys fetched")


@feed.command("entitlement")
@click.option("--beneficiary", default=None, metavar="ACCOUNT", help="Whose entitlement (default: yours).")
@click.option("--account", "account", default=None, metavar="NAME", help="Your account (default 'default').")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@read_options
@pass_feed
def feed_entitlement(ref: FeedRef, beneficiary: str | None, account: str | None, key_file: Path | None,
                     api_url: str | None, as_json: bool) -> None:
    """Show an account's entitlement to a paid feed, the current key epoch and the feed's paid terms."""
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    who = address_of(beneficiary, "--beneficiary") if beneficiary else load_account(account, key_file).address
    answer = api.entitlement(stream_id, who)
    if as_json:
        echo_json(answer)
        return
    until = answer.get("active_until_key_epoch")
    click.echo(f"{who} on {stream_id}: {'no entitlement' if until is None else f'entitled through epoch {until}'}; "
               f"current key epoch {answer.get('current_key_epoch')}")


@feed.command("consume")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None,
              help="The account key epoch keys are sealed to (default: your ACTIVE one).")
@click.option("--cursor", type=click.IntRange(min=0), default=0, show_default=True, help="Last sequence read.")
@click.option("--limit", type=click.IntRange(min=1, max=500), default=100, show_default=True)
@for_account_option
@keymgr_option
@write_options
@pass_feed
def feed_consume(ref: FeedRef, account_key_id: int | None, cursor: int, limit: int, for_account: str | None,
                 keymgr_url: str | None, api_url: str | None, account: str | None, key_file: Path | None,
                 as_json: bool) -> None:
    """Pull, verify, decrypt and print a paid feed's messages after --cursor (the public CLI's
    ``consume``; the same as ``get-since --decrypt``). Epoch keys missing here are fetched sealed
    to the account key; ENTITLEMENT_REQUIRED for an epoch not bought. On a confidential private
    feed it reads as a member: each message unmasked with the keyload sealed to your account key."""
    from watchtower.cli.private_feed_cmd import is_confidential, read_confidential

    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    if is_confidential(api, stream_id):
        read_confidential(api, stream_id, cursor=cursor, limit=limit, owner=None, account=account,
                          key_file=key_file, as_json=as_json)
        return
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account, account_key_id)
    subscriber = Subscriber(api, stream_id, cursor, None, decrypt=True, epoch_keys=ring)
    subscriber.key_schedule()  # the chain verifies before any message is trusted
    echo_decrypted_page(subscriber.poll_page(limit), as_json)
