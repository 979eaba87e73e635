"""Epoch keys sealed ahead of time, from the command line: ``feed ID pre-wrap-epochs | wrap-daemon |
rewrap-epochs`` (the public CLI's names).

A paid feed's reader fetches its epoch keys from the key manager sealed to its X25519 account
key and keeps them on disk (`client.prewrap`); these commands do it before the reads that need
them, so a read needs no key manager round trip: a range now (``pre-wrap-epochs``), a window kept
ahead of the current epoch within the entitlement (``wrap-daemon``), or every kept key sealed again
to a new account key after a rotation (``rewrap-epochs``). Only epochs the account bought are
sealed; the keys are never printed.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from watchtower.cli.account_cmd import load_account
from watchtower.cli.feed_group import FeedRef, feed, pass_feed, write_options
from watchtower.cli.json_output import echo_json
from watchtower.cli.paid_feed_cmd import epoch_key_ring, for_account_option, keymgr_option
from watchtower.client.http import ApiClient
from watchtower.client.ledger import Ledger
from watchtower.client.paid import current_key_epoch, paid_config
from watchtower.client.prewrap import WrapReport, pre_wrap, rewrap, wrap_ahead
from watchtower.protocol.errors import InvalidAccountKeyError


def _active_key_id(api: ApiClient, address: str) -> int:
    """The account's newest ACTIVE account key (INVALID_ACCOUNT_KEY without one)."""
    keys = api.account_info(address).get("keys", [])
    active = [int(k["account_key_id"]) for k in keys if k.get("status") == "ACTIVE"]
    if not active:
        raise InvalidAccountKeyError(f"{address} has no ACTIVE account key; register one with "
                                     "`watchtower account register-key --scheme x25519`")
    return max(active)


def _echo_wrap(report: WrapReport, as_json: bool, what: str) -> None:
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"{report.stream_id}: {what} {len(report.fetched)} epoch key(s) {report.fetched or ''}".rstrip()
               + (f"; {len(report.already)} already sealed here" if report.already else ""))


@feed.command("pre-wrap-epochs")
@click.option("--from", "from_epoch", type=click.IntRange(min=0), required=True, help="First key epoch.")
@click.option("--to", "to_epoch", type=click.IntRange(min=0), required=True, help="Last key epoch (inclusive).")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None,
              help="Seal to this account key (default: your ACTIVE one).")
@for_account_option
@keymgr_option
@write_options
@pass_feed
def feed_pre_wrap_epochs(ref: FeedRef, from_epoch: int, to_epoch: int, account_key_id: int | None,
                         for_account: str | None, keymgr_url: str | None, api_url: str | None, account: str | None,
                         key_file: Path | None, as_json: bool) -> None:
    """Seal the epoch keys --from..--to to your account key now, so reading them later needs no key
    manager round trip (epochs already sealed here are skipped). Only epochs you bought."""
    if to_epoch < from_epoch:
        raise click.UsageError("--to must not be below --from")
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account, account_key_id)
    if ring.account_key_id is None:
        ring.account_key_id = _active_key_id(api, ring.holder.address)
    _echo_wrap(pre_wrap(ring, stream_id, from_epoch, to_epoch), as_json, "sealed")


@feed.command("wrap-daemon")
@click.option("--depth", type=click.IntRange(min=0, max=1024), required=True,
              help="Keep the current key epoch and this many after it sealed here.")
@click.option("--interval-s", type=click.FloatRange(min=0.1), default=None,
              help="Seconds between checks (default: a tenth of a key epoch, at most 60).")
@click.option("--once", is_flag=True, help="One step, then exit (for cron, and tests).")
@for_account_option
@keymgr_option
@write_options
@pass_feed
def feed_wrap_daemon(ref: FeedRef, depth: int, interval_s: float | None, once: bool, for_account: str | None,
                     keymgr_url: str | None, api_url: str | None, account: str | None, key_file: Path | None,
                     as_json: bool) -> None:
    """Keep --depth epochs ahead sealed to your account key, within your entitlement, until stopped.

    Each step seals what is missing of current..current+depth (capped at the entitlement's end)
    and nothing else; two daemons for the same account and feed are safe (the store is locked).
    """
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account)
    config = paid_config({"stream_id": stream_id, **api.stream_info(stream_id)})
    ledger = Ledger(api, ring.holder)
    pause = interval_s if interval_s is not None else min(60.0, max(0.1, config.key_epoch_blocks / 10))
    while True:
        ring.account_key_id = _active_key_id(api, ring.holder.address)  # follows a rotated account key
        report = wrap_ahead(ring, stream_id, current_epoch=current_key_epoch(config), depth=depth,
                            entitled_until=ledger.active_until(stream_id))
        _echo_wrap(report, as_json, "sealed ahead")
        if once:
            return
        time.sleep(pause)


@feed.command("rewrap-epochs")
@click.option("--account-key-id", type=click.IntRange(min=1), default=None,
              help="Seal to this account key (default: your newest ACTIVE one).")
@click.option("--from", "from_epoch", type=click.IntRange(min=0), default=0, show_default=True,
              help="Only epochs from this one on.")
@for_account_option
@keymgr_option
@write_options
@pass_feed
def feed_rewrap_epochs(ref: FeedRef, account_key_id: int | None, from_epoch: int, for_account: str | None,
                       keymgr_url: str | None, api_url: str | None, account: str | None, key_file: Path | None,
                       as_json: bool) -> None:
    """After an account-key rotation: seal every epoch key kept here again to the new key (the ones
    already sealed to it are left as they are)."""
    api = ApiClient(api_url)
    stream_id = ref.resolve(api)[0]
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account)
    target = account_key_id if account_key_id is not None else _active_key_id(api, ring.holder.address)
    _echo_wrap(rewrap(ring, stream_id, target, from_epoch=from_epoch), as_json, "re-sealed")
