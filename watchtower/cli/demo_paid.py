"""The demo's paid-feed part: encrypted publishes, a purchase and its fee split, who can and cannot decrypt.

Everything goes through the SDK against the running stack and its Stream Key Manager: the
plaintext exists only in the publisher, the key manager and the entitled reader; the stream and
every other subscriber see ciphertext.
"""

from __future__ import annotations

from collections.abc import Callable

import click
import nacl.signing

from watchtower.cli.demo_wait import STEP_TIMEOUT_S
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.keymgr import KeyManagerClient
from watchtower.client.ledger import Ledger
from watchtower.client.paid import EpochKeyRing, PaidPublisher, current_key_epoch, paid_config
from watchtower.client.sdk import create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import WatchtowerError

FEE_PER_EPOCH = 1_000
PROTOCOL_FEE_BPS = 500  # 5 % on top of the publisher's price
# Long epochs (a day of 1 s blocks), so the demo never straddles an epoch boundary by accident.
EPOCH_BLOCKS = 86_400


def _refused(label: str, call: Callable[[], object]) -> None:
    try:
        call()
        click.echo(f"  {label}: unexpectedly allowed")
    except WatchtowerError as err:
        click.echo(f"  {label}: refused [{err.code}] {err.message[:140]}")


def show_paid_feed(api: ApiClient, keymgr: KeyManagerClient, minter: Account, protocol_treasury: str) -> None:
    """Run the paid-feed story (see the module docstring) and print each step."""
    home = minter.home
    owner, reader, stranger, sponsor, friend = (
        Account(nacl.signing.SigningKey.generate(), name=f"paid-{n}", home=home)
        for n in ("owner", "reader", "stranger", "sponsor", "friend"))
    click.secho("  -- a paid feed: the key manager encrypts, the stream carries ciphertext only", bold=True)
    key = nacl.signing.SigningKey.generate()
    created = create_feed(api, owner, name="paid-signals", publisher_key_hex=bytes(key.verify_key).hex(),
                          access_mode="PLATFORM_MANAGED",
                          paid_stream_config={"fee_per_key_epoch_cby": FEE_PER_EPOCH, "protocol_fee_bps":
                                              PROTOCOL_FEE_BPS, "publisher_treasury": owner.address,
                                              "key_epoch_blocks": EPOCH_BLOCKS})
    sid = created["stream_id"]
    wait_until_visible(api, sid, feed_id=created["feed_id"], timeout_s=STEP_TIMEOUT_S)
    config = paid_config(api.stream_info(sid))
    epoch = current_key_epoch(config)
    publisher = PaidPublisher(api, owner, sid, key, keymgr, config=config)
    for i in range(1, 4):
        publisher.publish("signal", f'{{"signal": "buy", "n": {i}}}'.encode())
    click.echo(f"  feed {created['feed_id']}: 3 messages encrypted by stream_encrypt (key epoch {epoch}) and "
               f"published with the key manager's receipt")

    click.secho("  -- CBY minted by the genesis minter; a purchase and its fee split", bold=True)
    mint = Ledger(api, minter)
    for who in (reader, sponsor):
        mint.mint_cby(who.address, 10_000)
    ledger = Ledger(api, reader)
    ledger.wait_for_balance(reader.address, 10_000, timeout_s=STEP_TIMEOUT_S)
    for who in (reader, stranger, sponsor):
        Ledger(api, who).add_account_key()  # the X25519 key epoch keys are sealed to
    parties = (("payer (reader)", reader.address), ("publisher treasury", owner.address),
               ("protocol treasury", protocol_treasury))
    before = {a: ledger.balance(a) for _, a in parties}
    receipt = ledger.acquire_epoch_access(sid, epoch + 1)
    ledger.wait_for_balance(owner.address, before[owner.address] + receipt.publisher_amount_cby,
                            timeout_s=STEP_TIMEOUT_S)
    ledger.wait_for_balance(protocol_treasury, before[protocol_treasury] + receipt.protocol_fee_cby,
                            timeout_s=STEP_TIMEOUT_S)
    click.echo(f"  reader bought epochs {receipt.from_key_epoch}..{receipt.to_key_epoch}: "
               f"{receipt.publisher_amount_cby} to the publisher + {receipt.protocol_fee_cby} protocol fee "
               f"= {receipt.total_amount_cby} CBY wei")
    for label, address in parties:
        click.echo(f"    {label:19} {before[address]:>7} -> {ledger.balance(address):>7}")

    click.secho("  -- who can read it", bold=True)
    ledger.wait_for_entitlement(sid, reader.address, epoch + 1, timeout_s=STEP_TIMEOUT_S)
    # The key manager learns of the purchase from the log a moment later: retry within the step's bound.
    ring = EpochKeyRing(keymgr, reader, settle_s=STEP_TIMEOUT_S, accounts=api)
    entitled = Subscriber(api, sid, decrypt=True, epoch_keys=ring)
    wait_until_visible(api, sid, min_head=3, timeout_s=STEP_TIMEOUT_S)
    page = entitled.poll_page(100, min_head=3, wait_ms=5000)
    click.echo(f"  the reader verifies, then decrypts locally: {[p.decode() for p in page.plaintexts]}")
    seen = Subscriber(api, sid).poll(100)
    click.echo(f"  a non-paying subscriber receives {len(seen)} messages, all "
               f"{', '.join(sorted({str(m.payload_format) for m in seen}))}, but no key:")
    _refused("    its epoch keys", lambda: EpochKeyRing(keymgr, stranger).fetch(sid, epoch, epoch))
    Ledger(api, sponsor).acquire_epoch_access(sid, epoch + 1, beneficiary_account=friend.address)
    through = Ledger(api, friend).wait_for_entitlement(sid, friend.address, epoch + 1, timeout_s=STEP_TIMEOUT_S)
    click.echo(f"  a sponsor paid for a friend: the friend is entitled through epoch {through}, the sponsor is not:")
    _refused("    the sponsor's epoch keys", lambda: EpochKeyRing(keymgr, sponsor).fetch(sid, epoch, epoch))
