"""One feed from the command line, mirroring the `cowboy watchtower` CLI over the HTTP API.

``feed ID …`` publishes, reads, rotates the publisher key, announces key epochs and shows one
feed; ``ID`` is a feed id (an integer, looked up in the registry) or a stream id. Making a feed
and listing the registry is `new_feed_cmd`; who reads a feed (subscriptions and the allowlist)
is `audience_cmd`. Writes are signed by the account found as in `account_cmd`; publishes are
additionally signed by the feed's publisher key, which ``new feed`` stored as
``$WATCHTOWER_HOME/publishers/<stream_id>.key``. Every read command takes ``--json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import nacl.signing

from watchtower.cli.account_cmd import identity_options, load_account
from watchtower.cli.feed_group import (
    FeedRef,
    echo_reply,
    feed,
    message_line,
    parse_json,
    pass_feed,
    read_options,
    settle,
    write_options,
)
from watchtower.cli.json_output import echo_json
from watchtower.client import account as keys
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher
from watchtower.client.stream_api import with_spec_names
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.constants import DEFAULT_CONTENT_TYPE
from watchtower.protocol.errors import RequestTimeoutError, StaleSequenceError, WatchtowerError
from watchtower.protocol.stream.message import TagValue


def parse_tags(text: str | None) -> dict[str, TagValue]:
    """``k=v,k2=v2`` as tags: true/false are bools, JSON numbers are numbers, ``"…"`` or anything else is text."""
    tags: dict[str, TagValue] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not k=v", param_hint="--tags")
        value: TagValue = raw
        if raw in ("true", "false"):
            value = raw == "true"
        elif len(raw) >= 2 and raw[0] == raw[-1] == '"':
            value = raw[1:-1]
        else:
            try:
                number = json.loads(raw)
            except ValueError:
                number = None
            if isinstance(number, int | float) and not isinstance(number, bool):
                value = float(number)
        tags[key.strip()] = value
    return tags


# --- Rendering -----------------------------------------------------------------------------------


def _echo_fields(data: Mapping[str, Any], names: tuple[str, ...]) -> None:
    width = max(len(n) for n in names)
    for name in names:
        if name in data:
            value = data[name]
            click.echo(f"{name.ljust(width)}  {'-' if value is None else value}")


# --- feed ID … -----------------------------------------------------------------------------------


@feed.command("publish")
@click.option("--kind", required=True, help="Message kind, e.g. price_batch.")
@click.option("--data", required=True, help="The payload: JSON text (any text with another --content-type).")
@click.option("--tags", default=None, metavar="K=V,…", help='Header tags: true/false, numbers or text ("…" is text).')
@click.option("--content-type", default=DEFAULT_CONTENT_TYPE, show_default=True)
@click.option("--sequence", type=click.IntRange(min=1), default=None,
              help="Publish only as this sequence (STALE_SEQUENCE otherwise); default: append.")
@click.option("--publisher-key-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Publisher key (default: the one stored when the feed was created here).")
@click.option("--keymgr", "keymgr_url", default=None, metavar="URL",
              help="Paid feeds: the Stream Key Manager that encrypts [env WATCHTOWER_KEYMGR].")
@click.option("--branch", default="main", show_default=True,
              help="Confidential feeds: the branch whose current keyload masks the message.")
@click.option("--rekey", "rekey_on_change", is_flag=True, default=False,
              help="Confidential feeds: when a member left the allowlist or a member's account key was revoked or "
                   "rotated since the current keyload, publish a new keyload for the remaining members first "
                   "(without it, such a message is refused before anything is sent).")
@write_options
@pass_feed
def feed_publish(ref: FeedRef, kind: str, data: str, tags: str | None, content_type: str, sequence: int | None,
                 publisher_key_file: Path | None, keymgr_url: str | None, branch: str, rekey_on_change: bool,
                 api_url: str | None, account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Append one signed message (owner only); --sequence makes it conditional.

    On a paid feed the data is encrypted by the key manager's stream_encrypt and published as
    CIPHERTEXT with the key manager's receipt; the plaintext never reaches the stream. On a
    confidential feed it is masked under the branch's current keyload, which the owner opens
    from the log with its own account key (`feed ID rekey` publishes one); nothing is masked or
    sent while that keyload still seals to a member who left or to a revoked or superseded
    account key (--rekey re-keys first instead).
    """
    from watchtower.cli.paid_feed_cmd import is_paid
    from watchtower.cli.private_feed_cmd import is_confidential, publish_confidential
    from watchtower.client.keymgr import KeyManagerClient
    from watchtower.client.paid import PaidPublisher

    if content_type == DEFAULT_CONTENT_TYPE:
        parse_json(data, "--data")
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    owner = load_account(account, key_file)
    if is_confidential(api, stream_id):
        if sequence is not None:
            raise click.UsageError("--sequence does not apply to a confidential feed: a masked payload is bound to "
                                   "the sequence it is published at, so it always appends")
        reply = with_spec_names(publish_confidential(
            api, owner, stream_id, publisher_key_file, branch=branch, kind=kind, plaintext=data.encode(),
            tags=parse_tags(tags), content_type=content_type, rekey_on_change=rekey_on_change))
        echo_reply(reply, as_json, f"published sequence {reply['sequence']} masked under branch {branch}'s keyload "
                                   f"(head {reply['head_sequence']})")
        return
    key = keys.read_key_file(publisher_key_file) if publisher_key_file else keys.load_publisher_key(stream_id)
    publisher = (PaidPublisher(api, owner, stream_id, key, KeyManagerClient(keymgr_url)) if is_paid(api, stream_id)
                 else Publisher(api, owner, stream_id, key))
    args = (kind, data.encode(), parse_tags(tags), content_type)
    try:
        reply = publisher.publish(*args, sequence=sequence)
    except StaleSequenceError:
        if sequence is not None:
            raise
        # A new process reads the head from the read side, which can trail the writer by a moment;
        # the refusal carried the writer's own head, so append once more after it.
        reply = publisher.publish(*args)
    reply = with_spec_names(reply)
    echo_reply(reply, as_json, f"published sequence {reply['sequence']} (head {reply['head_sequence']}, "
                               f"floor {reply['floor_sequence']})")


@feed.command("get-since")
@click.option("--cursor", type=click.IntRange(min=0), required=True, help="Last sequence read (0: start).")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many messages (1..500).")
@click.option("--filter", "filter_json", default=None, metavar="JSON", help="CIP-7 filter DSL over headers.")
@click.option("--min-head", type=click.IntRange(min=1), default=None,
              help="First wait (up to --wait-ms) until the head reaches this sequence.")
@click.option("--wait-ms", type=click.IntRange(min=0), default=2000, show_default=True)
@click.option("--proof", is_flag=True, default=False,
              help="With --filter: also check the server's proof that no matching message was skipped.")
@click.option("--owner", default=None, metavar="ADDRESS",
              help="Refuse the stream unless its key chain starts at this owner's signed create command.")
@click.option("--decrypt", is_flag=True, default=False,
              help="Paid feeds: decrypt locally with your epoch keys (fetched sealed to your account key). "
                   "Confidential feeds: unmask with the keyloads sealed to your newest local account key.")
@click.option("--keymgr", "keymgr_url", default=None, metavar="URL",
              help="With --decrypt: the Stream Key Manager [env WATCHTOWER_KEYMGR].")
@click.option("--for-account", "for_account", default=None, metavar="NAME",
              help="With --decrypt: this saved account's entitlement and key; you sign as its authorized actor.")
@identity_options
@read_options
@pass_feed
def feed_get_since(ref: FeedRef, cursor: int, limit: int, filter_json: str | None, min_head: int | None,
                   wait_ms: int, proof: bool, owner: str | None, decrypt: bool, keymgr_url: str | None,
                   for_account: str | None, account: str | None, key_file: Path | None, api_url: str | None,
                   as_json: bool) -> None:
    """Read verified messages after --cursor.

    The publisher key schedule is verified first, from the owner's address (docs/key-chain.md): a
    key without the owner's signed command fails with INVALID_SIGNATURE and exit status 1. With
    --proof and --filter the page's completeness proof is checked too (docs/page-proofs.md).
    With --decrypt (a paid feed) each verified message is decrypted with your account's epoch
    keys: ENTITLEMENT_REQUIRED for an epoch your account has not bought. On a confidential feed
    --decrypt unmasks each message with the keyload sealed to you (UNAUTHORIZED where you are not
    a member).
    """
    from watchtower.cli.paid_feed_cmd import echo_decrypted_page, epoch_key_ring
    from watchtower.cli.private_feed_cmd import is_confidential, read_confidential

    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    flt = parse_json(filter_json, "--filter") if filter_json else None
    if decrypt and is_confidential(api, stream_id):
        if flt is not None or proof or min_head is not None:
            raise click.UsageError("--filter, --proof and --min-head do not apply to --decrypt on a confidential "
                                   "feed: it reads every message to take in the keyloads")
        read_confidential(api, stream_id, cursor=cursor, limit=limit, owner=owner, account=account,
                          key_file=key_file, as_json=as_json)
        return
    ring = epoch_key_ring(api, keymgr_url, load_account(account, key_file), for_account) if decrypt else None
    subscriber = Subscriber(api, stream_id, cursor, flt, proof=proof, expected_owner=owner, decrypt=decrypt,
                            epoch_keys=ring)
    subscriber.key_schedule()  # even an empty page is refused when the chain does not verify
    page = subscriber.poll_page(limit, min_head=min_head, wait_ms=wait_ms if min_head else None)
    if decrypt:
        echo_decrypted_page(page, as_json)
        return
    if as_json:
        echo_json(with_spec_names({"stream_id": stream_id, "messages": [m.to_json_dict() for m in page.messages],
                                   "head_sequence": page.head_sequence, "floor_sequence": page.floor_sequence,
                                   "next_cursor": page.next_cursor, "verified": True,
                                   **({"proven_complete": True} if proof else {})}))
        return
    for msg in page.messages:
        click.echo(message_line(msg))
    click.echo(f"{len(page.messages)} verified message(s){' (proven complete)' if proof else ''}; "
               f"head {page.head_sequence}, floor {page.floor_sequence}, next cursor {page.next_cursor}")


@feed.command("get-head")
@read_options
@pass_feed
def feed_get_head(ref: FeedRef, api_url: str | None, as_json: bool) -> None:
    """Show the head, floor and current publisher key."""
    api = ApiClient(api_url)
    head = with_spec_names(api.get_head(ref.resolve(api)[0]))
    if as_json:
        echo_json(head)
        return
    _echo_fields(head, ("stream_id", "owner", "head_sequence", "floor_sequence", "capacity", "signing_key_id",
                        "publisher_key", "policy", "access_mode", "active_subscribers", "max_subscribers",
                        "last_key_epoch"))


@feed.command("get-key-at-sequence")
@click.argument("sequence", type=click.IntRange(min=1))
@read_options
@pass_feed
def feed_get_key_at_sequence(ref: FeedRef, sequence: int, api_url: str | None, as_json: bool) -> None:
    """Show the publisher key in force at SEQUENCE."""
    api = ApiClient(api_url)
    entry = with_spec_names(api.key_at_sequence(ref.resolve(api)[0], sequence))
    if as_json:
        echo_json(entry)
        return
    _echo_fields(entry, ("signing_key_id", "publisher_key", "effective_sequence"))


@feed.command("rotate-publisher-key")
@click.option("--new-key-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Rotate to the key in this file (default: a fresh key).")
@write_options
@pass_feed
def feed_rotate_publisher_key(ref: FeedRef, new_key_file: Path | None, api_url: str | None, account: str | None,
                              key_file: Path | None, as_json: bool) -> None:
    """Switch to a new publisher key from the next sequence (owner only); the old key file is kept."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    owner = load_account(account, key_file)
    new_key = keys.read_key_file(new_key_file) if new_key_file else nacl.signing.SigningKey.generate()
    active = keys.publisher_key_path(stream_id)
    pending = keys.write_key_file(active.with_name(f"{stream_id}.pending.key"), new_key, overwrite=True)
    cmd = owner.sign("rotate_publisher_key", stream_id, {"new_key": bytes(new_key.verify_key)})
    try:
        reply = api.command(cmd)
    except RequestTimeoutError:
        click.echo(f"the rotation may still take effect; the new key stays at {pending} (check `get-head`)", err=True)
        raise
    except WatchtowerError:
        pending.unlink(missing_ok=True)
        raise
    path = keys.replace_publisher_key(stream_id, new_key, old_signing_key_id=reply["old_signing_key_id"])
    pending.unlink(missing_ok=True)
    settle(api, stream_id, signing_key_id=reply["signing_key_id"])
    echo_reply({**reply, "publisher_key_file": str(path)}, as_json,
               f"publisher key {reply['signing_key_id']} signs from sequence {reply['effective_sequence']}; "
               f"saved to {path} (key {reply['old_signing_key_id']} kept beside it)")

@feed.command("announce-key-epoch")
@click.argument("key_epoch", type=click.IntRange(min=0))
@write_options
@pass_feed
def feed_announce_key_epoch(ref: FeedRef, key_epoch: int, api_url: str | None, account: str | None,
                            key_file: Path | None, as_json: bool) -> None:
    """Announce that the feed's content keys move to KEY_EPOCH from this block on (owner only).

    CIP-7 announce_key_epoch: a KeyEpochRotated event; epochs never go back (INVALID_ARGUMENT below
    the last one announced). `feed ID get-head` and GET /v1/streams/{id}/key-epochs show it.
    """
    from watchtower.client.sdk import announce_key_epoch

    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    reply = announce_key_epoch(api, load_account(account, key_file), stream_id, key_epoch)
    echo_reply(reply, as_json, f"{stream_id} key epoch {reply.get('key_epoch', key_epoch)} from block "
                               f"{reply.get('effective_block_height')}")

@feed.command("info")
@read_options
@pass_feed
def feed_info(ref: FeedRef, api_url: str | None, as_json: bool) -> None:
    """Show the feed's registry entry, config and state."""
    api = ApiClient(api_url)
    stream_id, entry = ref.resolve(api)
    info = with_spec_names(api.stream_info(stream_id))
    if entry is None and isinstance(info.get("feed_id"), int):
        entry = api.feed(info["feed_id"])
    if as_json:
        echo_json({**info, "feed": entry})
        return
    listing = {"feed_id": entry["feed_id"], "name": entry["name"], "description": entry.get("description")} if entry \
        else {"feed_id": "(not listed)"}
    _echo_fields({**listing, **info, "allowlist": len(info.get("allowlist") or [])},
                 ("feed_id", "name", "description", "stream_id", "owner", "head_sequence", "floor_sequence", "capacity",
                  "policy", "access_mode", "active_subscribers", "max_subscribers", "signing_key_id", "publisher_key",
                  "key_epoch", "allowlist"))
