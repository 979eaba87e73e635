"""Who reads a feed, from the command line: ``feed ID subscribe|follow|unsubscribe|subscribers``
and the owner's ``feed ID set-policy`` and ``feed ID allowlist add|remove``.

Subscribing, unsubscribing and the owner's policy and allowlist are signed commands, sent as the
account found as in `account_cmd`; ``follow`` and ``subscribe --follow`` print the verified
messages live (`follow_cmd`); ``subscribers`` reads the feed's subscriptions (no key needed).
Every read command takes ``--json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import click

from watchtower.cli.account_cmd import echo_table, load_account
from watchtower.cli.feed_config import POLICIES
from watchtower.cli.feed_group import (
    FeedRef,
    echo_reply,
    feed,
    parse_json,
    pass_feed,
    read_options,
    write_options,
)
from watchtower.cli.follow_cmd import feed_id_of, follow_feed, follow_options
from watchtower.cli.json_output import echo_json
from watchtower.client.http import ApiClient
from watchtower.client.stream_api import with_spec_names
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.addresses import require_address

MODES = {"push": "PUSH", "pull": "PULL", "push-with-pull-fallback": "PUSH_WITH_PULL_FALLBACK",
         "push-fallback": "PUSH_WITH_PULL_FALLBACK"}  # (the last: the 0.1 name, kept for one release)
#: `Subscriber.stream`'s mode for each subscription mode.
STREAM_MODES = {"PUSH": "push", "PULL": "pull", "PUSH_WITH_PULL_FALLBACK": "push-with-pull-fallback"}


def _signed(ref: FeedRef, api_url: str | None, account: str | None, key_file: Path | None, method: str,
            body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(stream id, reply) of `method` with `body`, signed by the account and sent for the feed `ref` names."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    return stream_id, api.command(load_account(account, key_file).sign(method, stream_id, body))


@feed.command("subscribe")
@click.option("--mode", type=click.Choice(list(MODES)), required=True,
              help="Delivery mode (push-fallback is the old name of push-with-pull-fallback).")
@click.option("--filter", "filter_json", default=None, metavar="JSON", help="CIP-7 filter DSL over headers.")
@click.option("--cursor", type=click.IntRange(min=0), default=None, help="Start after this sequence (default: head).")
@click.option("--follow", is_flag=True,
              help="Then print verified messages as they arrive, in the subscription's mode (Ctrl-C stops).")
@follow_options
@write_options
@pass_feed
def feed_subscribe(ref: FeedRef, mode: str, filter_json: str | None, cursor: int | None, follow: bool,
                   gateway_url: str | None, count: int | None, idle_timeout: float | None, pull_interval: float,
                   heartbeat: int | None, api_url: str | None, account: str | None, key_file: Path | None,
                   as_json: bool) -> None:
    """Subscribe your account (or update its subscription).

    With --follow: pull mode long-polls get_since; push mode prints the account's pushes as they
    arrive through the event stream (/v1/feeds/ID/events?subscriber=…); push-with-pull-fallback
    prints them too and catches up with get_since, so nothing is missed if pushes stall.
    """
    flt = parse_json(filter_json, "--filter") if filter_json else None
    body: dict[str, Any] = {"mode": MODES[mode]}
    if flt is not None:
        body["filter"] = flt
    if cursor is not None:
        body["start_cursor"] = cursor
    api = ApiClient(api_url)
    stream_id, entry = ref.resolve(api)
    me = load_account(account, key_file)
    reply = api.command(me.sign("subscribe", stream_id, body))
    if follow and as_json:
        echo_json(reply, line=True)  # JSON lines: the reply, then one per message
    else:
        echo_reply(reply, as_json, f"{reply.get('status', 'ACTIVE').lower()} {MODES[mode]} subscription to {stream_id} "
                                   f"from cursor {reply.get('start_cursor')}")
    if follow:
        stream_mode = STREAM_MODES[MODES[mode]]
        subscriber = Subscriber(api, stream_id, int(reply.get("start_cursor") or 0), flt)
        feed_id = feed_id_of(api, stream_id, entry) if stream_mode != "pull" else None
        if stream_mode != "pull":
            _wait_subscribed(api, stream_id, me.address)  # the event stream checks the subscription
        follow_feed(api, subscriber, feed_id, mode=stream_mode, gateway_url=gateway_url, subscriber_address=me.address,
                    as_json=as_json, count=count, idle_timeout_s=idle_timeout, pull_interval_s=pull_interval,
                    heartbeat_s=heartbeat)


def _wait_subscribed(api: ApiClient, stream_id: str, address: str, timeout_s: float = 10.0) -> None:
    """Wait until the read side shows `address`'s active subscription (it trails the writer a moment)."""
    deadline = time.monotonic() + timeout_s
    while not any(s.get("subscriber") == address for s in api.subscribers(stream_id, active_only=True)):
        if time.monotonic() >= deadline:
            click.echo("note: the subscription is not visible on the read side yet; following anyway", err=True)
            return
        time.sleep(0.1)


@feed.command("follow")
@click.option("--cursor", type=click.IntRange(min=0), default=None,
              help="Print everything after this sequence first (default: only new messages).")
@click.option("--filter", "filter_json", default=None, metavar="JSON", help="CIP-7 filter DSL over headers.")
@click.option("--owner", default=None, metavar="ADDRESS",
              help="Refuse the stream unless its key chain starts at this owner's signed create command.")
@click.option("--no-pull", is_flag=True, help="Events only: no get_since catch-up (gaps are not filled).")
@follow_options
@read_options
@pass_feed
def feed_follow(ref: FeedRef, cursor: int | None, filter_json: str | None, owner: str | None, no_pull: bool,
                gateway_url: str | None, count: int | None, idle_timeout: float | None, pull_interval: float,
                heartbeat: int | None, api_url: str | None, as_json: bool) -> None:
    """Print the feed's verified messages live, through Server-Sent Events, falling back to pull.

    Events come from /v1/feeds/ID/events on the API (or --gateway); get_since catches up from
    --cursor at once, every --pull-interval seconds, whenever the events skip a sequence, and
    continuously while the event stream is down, so each message is printed once, in order,
    without gaps. --json prints one StreamMessage JSON per line. A summary goes to stderr.
    """
    api = ApiClient(api_url)
    stream_id, entry = ref.resolve(api)
    flt = parse_json(filter_json, "--filter") if filter_json else None
    start = cursor if cursor is not None else int(with_spec_names(api.get_head(stream_id))["head_sequence"])
    subscriber = Subscriber(api, stream_id, start, flt, expected_owner=owner)
    follow_feed(api, subscriber, feed_id_of(api, stream_id, entry),
                mode="push" if no_pull else "push-with-pull-fallback", gateway_url=gateway_url,
                subscriber_address=None, as_json=as_json, count=count, idle_timeout_s=idle_timeout,
                pull_interval_s=pull_interval, heartbeat_s=heartbeat)


@feed.command("unsubscribe")
@write_options
@pass_feed
def feed_unsubscribe(ref: FeedRef, api_url: str | None, account: str | None, key_file: Path | None,
                     as_json: bool) -> None:
    """Cancel your account's subscription."""
    stream_id, reply = _signed(ref, api_url, account, key_file, "unsubscribe", {})
    echo_reply(reply, as_json, f"unsubscribed from {stream_id}")


@feed.command("set-policy")
@click.argument("policy", type=click.Choice(list(POLICIES)))
@write_options
@pass_feed
def feed_set_policy(ref: FeedRef, policy: str, api_url: str | None, account: str | None, key_file: Path | None,
                    as_json: bool) -> None:
    """Set who may subscribe: public, or private-allowlist (owner only)."""
    stream_id, reply = _signed(ref, api_url, account, key_file, "set_subscription_policy",
                               {"policy": POLICIES[policy]})
    echo_reply(reply, as_json, f"{stream_id} policy is now {reply.get('policy', POLICIES[policy])}")


@feed.group("allowlist")
def feed_allowlist() -> None:
    """Add or remove subscribers of a private-allowlist feed (owner only)."""


#: How long ``allowlist remove`` waits for the read side to show a removal: a confidential feed's
#: publisher checks the allowlist there before it masks, so the next `publish` must see it.
REMOVAL_VISIBLE_S: Final = 10.0


def _removal_visible(api: ApiClient, stream_id: str, address: str, timeout_s: float = REMOVAL_VISIBLE_S) -> bool:
    """Whether the read side stops listing `address` on the allowlist within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while address in (api.stream_info(stream_id).get("allowlist") or []):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _allowlist_command(action: str, method: str) -> None:
    @feed_allowlist.command(action)
    @click.argument("address")
    @write_options
    @pass_feed
    def command(ref: FeedRef, address: str, api_url: str | None, account: str | None, key_file: Path | None,
                as_json: bool) -> None:
        stream_id, reply = _signed(ref, api_url, account, key_file, method,
                                   {"address": require_address(address, "ADDR")})
        if action == "remove" and not _removal_visible(ApiClient(api_url), stream_id, address):
            click.echo(f"note: the read side does not show the removal yet; on a confidential feed wait until "
                       f"`watchtower feed {ref.ref} info` no longer lists {address} before the next publish",
                       err=True)
        echo_reply(reply, as_json, f"{'added' if action == 'add' else 'removed'} {address} "
                                   f"{'to' if action == 'add' else 'from'} the allowlist of {stream_id}")

    command.__doc__ = f"{action.capitalize()} ADDRESS {'to' if action == 'add' else 'from'} the allowlist."
    command.help = command.__doc__


_allowlist_command("add", "allowlist_add")
_allowlist_command("remove", "allowlist_remove")


@feed.command("subscribers")
@click.option("--active-only", is_flag=True, help="Only ACTIVE subscriptions.")
@read_options
@pass_feed
def feed_subscribers(ref: FeedRef, active_only: bool, api_url: str | None, as_json: bool) -> None:
    """List the feed's subscriptions (no key needed)."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    subs = api.subscribers(stream_id, active_only=active_only)
    if as_json:
        echo_json({"stream_id": stream_id, "subscribers": subs})
        return
    rows = [(s.get("subscriber"), s.get("mode"), s.get("status"), s.get("start_cursor"), s.get("filter_json") or "")
            for s in subs]
    echo_table(("SUBSCRIBER", "MODE", "STATUS", "START", "FILTER"), rows, empty=f"{stream_id} has no subscribers")
