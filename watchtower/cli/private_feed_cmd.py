"""Confidential private feeds from the command line (docs/private-feeds.md).

``feed ID keyloads`` lists the keyloads published in a stream and their audiences, by member
address and account key id, from the verified messages: anyone may list them, and nothing printed
is a key (a sealed box, a session key or a key commitment is never shown). ``feed ID get-since
--decrypt`` on a confidential feed (`read_confidential`) reads as a member: it takes in the
keyloads from the start of the retained window, opens the one sealed to the account's newest
local X25519 account key (``watchtower account keys add``), and prints the unmasked payloads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from watchtower.cli.account_cmd import echo_json, load_account
from watchtower.cli.feed_group import FeedRef, feed, pass_feed, read_options
from watchtower.client.account_keys import load_account_key, local_account_key_ids
from watchtower.client.http import ApiClient
from watchtower.client.private import TAG_KEYLOAD, ConfidentialReader
from watchtower.client.sdk import Subscriber
from watchtower.protocol.errors import DecryptionFailedError, InvalidArgumentError, UnauthorizedError
from watchtower.protocol.keyload import KEYLOAD_KIND, check_keyload, decode_part
from watchtower.protocol.message import StreamMessage

_PAGE = 500


def is_confidential(api: ApiClient, stream_id: str) -> bool:
    """Whether the stream's config says confidential (false for every stream that predates the flag)."""
    config = api.stream_info(stream_id).get("config") or {}
    return bool(config.get("confidential", False))


def _verified_messages(api: ApiClient, stream_id: str, owner: str | None,
                       until: int | None = None) -> list[StreamMessage]:
    """Every retained message up to sequence `until` (all when None), each verified by a Subscriber."""
    subscriber = Subscriber(api, stream_id, 0, None, expected_owner=owner)
    subscriber.key_schedule()  # the chain verifies before any message is trusted
    out: list[StreamMessage] = []
    while True:
        page = subscriber.poll_page(_PAGE)
        out.extend(m for m in page.messages if until is None or m.sequence <= until)
        if not page.messages or page.next_cursor >= page.head_sequence or (until is not None
                                                                          and page.next_cursor >= until):
            return out


def keyload_summaries(messages: list[StreamMessage]) -> list[dict[str, Any]]:
    """The keyloads among `messages`, in order of their first part: id, branch, sequences, parts
    seen of how many, whether every part is there and checks (`check_keyload`), and the members
    (address, account key id). Never a sealed key nor a key commitment."""
    found: dict[bytes, dict[str, Any]] = {}
    for msg in messages:
        if msg.kind != KEYLOAD_KIND:
            continue
        try:
            part = decode_part(msg.payload_inline)
        except InvalidArgumentError:
            continue  # a writer of a confidential stream refuses those; another stream's are not keyloads
        entry = found.setdefault(part.keyload_id, {"parts": {}, "sequences": []})
        entry["parts"][part.part] = part
        entry["sequences"].append(msg.sequence)
    out = []
    for kid, entry in found.items():
        parts = list(entry["parts"].values())
        head = parts[0]
        try:
            members = check_keyload(parts).members
            complete = True
        except InvalidArgumentError:
            members = tuple(m for p in sorted(parts, key=lambda p: p.part) for m, _ in p.entries)
            complete = False
        out.append({"keyload_id": kid.hex(), "branch": head.branch, "sequences": entry["sequences"],
                    "parts": head.parts, "parts_seen": len(parts), "complete": complete,
                    "member_count": head.members,
                    "members": [{"address": m.address, "account_key_id": m.account_key_id} for m in members]})
    return out


@feed.command("keyloads")
@click.option("--owner", default=None, metavar="ADDRESS",
              help="Refuse the stream unless its key chain starts at this owner's signed create command.")
@read_options
@pass_feed
def feed_keyloads(ref: FeedRef, owner: str | None, api_url: str | None, as_json: bool) -> None:
    """List the keyloads of a confidential feed and who each is sealed to (address, account key id)."""
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    summaries = keyload_summaries(_verified_messages(api, stream_id, owner))
    if as_json:
        echo_json({"stream_id": stream_id, "keyloads": summaries})
        return
    if not summaries:
        click.echo(f"{stream_id} has no keyload in its retained messages")
        return
    for s in summaries:
        state = "complete" if s["complete"] else f"{s['parts_seen']} of {s['parts']} part(s) retained"
        seqs = s["sequences"]
        click.echo(f"keyload {s['keyload_id']}  branch {s['branch']}  sequence(s) {seqs[0]}-{seqs[-1]}  "
                   f"{s['member_count']} member(s), {state}")
        for m in s["members"]:
            click.echo(f"  {m['address']}  account key {m['account_key_id']}")


def read_confidential(api: ApiClient, stream_id: str, *, cursor: int, limit: int, owner: str | None,
                      account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Print the messages after `cursor` (at most `limit`) unmasked for the loaded account; a
    message it cannot open is shown with its error (UNAUTHORIZED: not a member of its keyload)."""
    who = load_account(account, key_file)
    ids = local_account_key_ids(who)
    if not ids:
        raise UnauthorizedError(f"{who.address} has no X25519 account key on this machine; add one with "
                                "`watchtower account keys add` and ask the owner to re-key the feed for you")
    reader = ConfidentialReader(who.address, bytes(load_account_key(who, ids[-1])))
    rows: list[dict[str, Any]] = []
    for msg in _verified_messages(api, stream_id, owner, until=cursor + limit):
        if msg.sequence <= cursor and msg.kind != KEYLOAD_KIND:
            continue  # before the cursor only the keyloads matter
        try:
            opened = reader.read(msg)
        except (UnauthorizedError, DecryptionFailedError) as exc:
            if msg.sequence > cursor:
                rows.append({"sequence": msg.sequence, "kind": msg.kind, "keyload_id": msg.tags.get(TAG_KEYLOAD),
                             "error": {"code": exc.code, "message": exc.message}})
            continue
        if msg.sequence <= cursor:
            continue
        row: dict[str, Any] = {"sequence": msg.sequence, "kind": msg.kind, "keyload_id": msg.tags.get(TAG_KEYLOAD),
                               "branch": opened.branch}
        if opened.plaintext is not None and msg.kind != KEYLOAD_KIND:
            try:
                row["plaintext"] = opened.plaintext.decode("utf-8")
            except UnicodeDecodeError:
                row["plaintext_hex"] = opened.plaintext.hex()
        rows.append(row)
    next_cursor = rows[-1]["sequence"] if rows else cursor
    if as_json:
        echo_json({"stream_id": stream_id, "messages": rows, "next_cursor": next_cursor, "verified": True})
        return
    for row in rows:
        if "error" in row:
            text = f"<{row['error']['code']}>"
        elif row["kind"] == KEYLOAD_KIND:
            text = f"<keyload {row['keyload_id']}>"
        else:
            text = row.get("plaintext", f"<{len(row.get('plaintext_hex', '')) // 2} bytes>")
        click.echo(f"#{row['sequence']}  {row['kind']}  {text}")
    click.echo(f"{len(rows)} verified message(s); next cursor {next_cursor}")
