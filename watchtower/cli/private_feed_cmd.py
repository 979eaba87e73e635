"""Confidential private feeds from the command line (docs/private-feeds.md).

``feed ID keyloads`` lists the keyloads published in a stream and their audiences, by member
address and account key id, from the verified messages: anyone may list them, and nothing printed
is a key (a sealed box, a session key or a key commitment is never shown). ``feed ID get-since
--decrypt`` on a confidential feed (`read_confidential`) reads as a member: it takes in the
keyloads from the start of the retained window, opens the one sealed to the account's newest
local X25519 account key (``watchtower account keys add``), and prints the unmasked payloads.

The owner's side: ``feed ID rekey`` publishes a new keyload for a branch's audience (the
allowlist and the owner, each sealed to its newest active account key; ``--if-changed`` only when
someone joined or left, or rotated or revoked a key), ``feed ID reseal --to ADDRESS`` gives a new
member chosen past keyloads, and ``feed ID publish`` masks under the branch's current keyload. The
owner is a member of every keyload, so each of these opens what it needs from the log with the
owner's own account key: no session key is ever kept on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from watchtower.cli.account_cmd import load_account
from watchtower.cli.feed_group import FeedRef, feed, pass_feed, read_options, write_options
from watchtower.cli.json_output import echo_json
from watchtower.client import account as keys
from watchtower.client.account import Account
from watchtower.client.account_keys import load_account_key, local_account_key_ids
from watchtower.client.http import ApiClient
from watchtower.client.private import TAG_KEYLOAD, ConfidentialPublisher, member_recipients
from watchtower.client.private_reader import ConfidentialReader
from watchtower.client.sdk import Publisher
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.confidential.keyload import KEYLOAD_KIND, Recipient, check_keyload, decode_part
from watchtower.protocol.confidential.reseal import RESEAL_KIND
from watchtower.protocol.confidential.session_key import DEFAULT_BRANCH, require_branch
from watchtower.protocol.errors import (
    DecryptionFailedError,
    InvalidArgumentError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.stream.message import StreamMessage, TagValue

_PAGE = 500


def is_confidential(api: ApiClient, stream_id: str) -> bool:
    """Whether the stream's config says confidential (false for every stream that predates the flag)."""
    config = api.stream_info(stream_id).get("config") or {}
    return bool(config.get("confidential", False))


def _verified_messages(api: ApiClient, stream_id: str, owner: str | None) -> list[StreamMessage]:
    """Every retained message, each verified by a Subscriber."""
    subscriber = Subscriber(api, stream_id, 0, None, expected_owner=owner)
    subscriber.key_schedule()  # the chain verifies before any message is trusted
    out: list[StreamMessage] = []
    while True:
        page = subscriber.poll_page(_PAGE)
        out.extend(page.messages)
        if not page.messages or page.next_cursor >= page.head_sequence:
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


def member_reader(who: Account) -> ConfidentialReader:
    """A reader holding every X25519 account key of `who` on this machine (a keyload sealed before
    a rotation opens with the key of its time)."""
    ids = local_account_key_ids(who)
    if not ids:
        raise UnauthorizedError(f"{who.address} has no X25519 account key on this machine; add one with "
                                "`watchtower account keys add` and ask the owner to re-key the feed for you")
    return ConfidentialReader(who.address, [bytes(load_account_key(who, i)) for i in ids])


def read_confidential(api: ApiClient, stream_id: str, *, cursor: int, limit: int, owner: str | None,
                      account: str | None, key_file: Path | None, as_json: bool) -> None:
    """Print the messages after `cursor` (at most `limit`) unmasked for the loaded account; a
    message it cannot open is shown with its error (UNAUTHORIZED: not a member of its keyload).
    Every retained keyload and reseal is taken in first, so a reseal published later opens the
    messages it covers."""
    reader = member_reader(load_account(account, key_file))
    messages = _verified_messages(api, stream_id, owner)
    reader.prime(messages)
    rows: list[dict[str, Any]] = []
    for msg in messages:
        if not cursor < msg.sequence <= cursor + limit:
            continue
        row: dict[str, Any] = {"sequence": msg.sequence, "kind": msg.kind, "keyload_id": msg.tags.get(TAG_KEYLOAD)}
        try:
            opened = reader.read(msg)
        except (UnauthorizedError, DecryptionFailedError, InvalidArgumentError) as exc:
            rows.append({**row, "error": {"code": exc.code, "message": exc.message}})
            continue
        row["branch"] = opened.branch
        if opened.plaintext is not None and msg.kind not in (KEYLOAD_KIND, RESEAL_KIND):
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
        elif row["kind"] == RESEAL_KIND:
            text = f"<reseal of keyload {row['keyload_id']}>"
        else:
            text = row.get("plaintext", f"<{len(row.get('plaintext_hex', '')) // 2} bytes>")
        click.echo(f"#{row['sequence']}  {row['kind']}  {text}")
    click.echo(f"{len(rows)} verified message(s); next cursor {next_cursor}")


# --- the owner's side -----------------------------------------------------------------------------


def _owner_publisher(api: ApiClient, who: Account, stream_id: str, publisher_key_file: Path | None,
                     branch: str, *, rekey_on_change: bool = False) -> ConfidentialPublisher:
    key = keys.read_key_file(publisher_key_file) if publisher_key_file else keys.load_publisher_key(stream_id)
    return ConfidentialPublisher(Publisher(api, who, stream_id, key), branch=branch, rekey_on_change=rekey_on_change)


def current_keyload_summary(messages: list[StreamMessage], branch: str) -> dict[str, Any] | None:
    """The last complete keyload of `branch` among `messages` (the writer's current one), or None."""
    complete = [s for s in keyload_summaries(messages) if s["branch"] == branch and s["complete"]]
    return complete[-1] if complete else None


def audience(api: ApiClient, stream_id: str, who: Account,
             chosen: tuple[str, ...]) -> tuple[list[Recipient], list[str]]:
    """The recipients of a keyload: `chosen` members (default: the whole allowlist) and the owner,
    each with its newest active account key; and the members left out for having none."""
    info = api.stream_info(stream_id)
    if info.get("owner") != who.address:
        raise UnauthorizedError(f"only the owner of {stream_id} ({info.get('owner')}) re-keys or reseals it; "
                                f"this account is {who.address}")
    allowlist = set(info.get("allowlist") or [])
    outside = sorted(set(chosen) - allowlist)
    if outside:
        raise UnauthorizedError(f"{', '.join(outside)} not on the allowlist of {stream_id}: add them first "
                                f"(`watchtower feed {stream_id} allowlist add ADDRESS`)")
    recipients, missing = member_recipients(api, {*(chosen or allowlist), who.address})
    if who.address in missing:
        raise UnauthorizedError(f"the owner {who.address} has no active X25519 account key, and the owner is a "
                                "member of every keyload: register one with `watchtower account keys add`")
    return recipients, missing


@feed.command("rekey")
@click.option("--branch", default=DEFAULT_BRANCH, show_default=True, help="The branch whose audience is re-keyed.")
@click.option("--member", "members", multiple=True, metavar="ADDRESS",
              help="The branch's audience (repeatable; each on the allowlist). Default: the whole allowlist.")
@click.option("--if-changed", is_flag=True, default=False,
              help="Only when the audience or a member's newest account key differs from the current keyload's.")
@click.option("--publisher-key-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Publisher key (default: the one stored when the feed was created here).")
@write_options
@pass_feed
def feed_rekey(ref: FeedRef, branch: str, members: tuple[str, ...], if_changed: bool,
               publisher_key_file: Path | None, api_url: str | None, account: str | None, key_file: Path | None,
               as_json: bool) -> None:
    """Publish a new keyload of a confidential feed's branch (owner only).

    Each member, and the owner, gets the session key sealed to its newest active X25519 account
    key; a member with none is left out and named. Run it after `allowlist remove` (the writer
    refuses the branch's next message until then), and when a member rotates or revokes an
    account key (`--if-changed` does nothing when no key changed, so it can run on a schedule).
    """
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    who = load_account(account, key_file)
    branch = require_branch(branch)
    recipients, missing = audience(api, stream_id, who, members)
    wanted = sorted((r.address, r.account_key_id) for r in recipients)
    current = current_keyload_summary(_verified_messages(api, stream_id, None), branch) if if_changed else None
    if current is not None and wanted == [(m["address"], m["account_key_id"]) for m in current["members"]]:
        result = {"stream_id": stream_id, "branch": branch, "rekeyed": False, "keyload_id": current["keyload_id"],
                  "members": len(wanted), "left_out": missing}
    else:
        keyload = _owner_publisher(api, who, stream_id, publisher_key_file, branch).rekey(recipients)
        result = {"stream_id": stream_id, "branch": branch, "rekeyed": True, "keyload_id": keyload.keyload_id.hex(),
                  "parts": len(keyload.parts), "members": len(wanted), "left_out": missing}
    if as_json:
        echo_json(result)
        return
    if result["rekeyed"]:
        click.echo(f"keyload {result['keyload_id']} of branch {branch} published in {result['parts']} part(s) "
                   f"for {result['members']} member(s)")
    else:
        click.echo(f"keyload {result['keyload_id']} of branch {branch} still seals to every member's newest key; "
                   "nothing to do")
    if missing:
        click.echo(f"left out (no active X25519 account key): {', '.join(missing)}", err=True)


@feed.command("reseal")
@click.option("--to", "to", multiple=True, required=True, metavar="ADDRESS",
              help="The member(s) to give past keyloads (repeatable; each on the allowlist).")
@click.option("--keyload", "keyload_ids", multiple=True, metavar="ID",
              help="A past keyload to reseal (repeatable). Default: every retained keyload of --branch.")
@click.option("--branch", default=None, help="With no --keyload: only this branch's keyloads (default: all).")
@click.option("--publisher-key-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Publisher key (default: the one stored when the feed was created here).")
@write_options
@pass_feed
def feed_reseal(ref: FeedRef, to: tuple[str, ...], keyload_ids: tuple[str, ...], branch: str | None,
                publisher_key_file: Path | None, api_url: str | None, account: str | None, key_file: Path | None,
                as_json: bool) -> None:
    """Give members past keyloads of a confidential feed: the history they may read (owner only).

    A member added to the allowlist reads from the next keyload on; this seals chosen earlier
    keyloads' session keys to it as well (the owner opens them from the log with its own account
    key). What a reseal gives cannot be taken back, as with any key once shared.
    """
    api = ApiClient(api_url)
    stream_id, _ = ref.resolve(api)
    who = load_account(account, key_file)
    recipients, missing = audience(api, stream_id, who, to)
    recipients = [r for r in recipients if r.address in to]
    if missing:
        raise UnauthorizedError(f"{', '.join(missing)} has no active X25519 account key to seal to: ask them to "
                                "register one (`watchtower account keys add`)")
    messages = _verified_messages(api, stream_id, None)
    reader = member_reader(who)
    reader.prime(messages)
    summaries = keyload_summaries(messages)
    chosen = [s for s in summaries if (s["keyload_id"] in keyload_ids if keyload_ids
                                       else branch is None or s["branch"] == branch)]
    unknown = sorted(set(keyload_ids) - {s["keyload_id"] for s in summaries})
    if unknown:
        raise InvalidArgumentError(f"no retained keyload {', '.join(unknown)} in {stream_id}; "
                                   f"`watchtower feed {stream_id} keyloads` lists them")
    done: list[dict[str, Any]] = []
    for summary in chosen:
        kid = bytes.fromhex(summary["keyload_id"])
        keyload = reader.keyload(kid)
        if keyload is None:
            raise UnauthorizedError(f"keyload {summary['keyload_id']} does not open with the owner's account keys "
                                    "on this machine (not sealed to them, or a part is no longer retained)")
        publisher = _owner_publisher(api, who, stream_id, publisher_key_file, summary["branch"])
        replies = publisher.reseal(kid, keyload.session_key, recipients)
        done.append({"keyload_id": summary["keyload_id"], "branch": summary["branch"],
                     "sequences": [r["sequence"] for r in replies]})
    if as_json:
        echo_json({"stream_id": stream_id, "to": sorted(to), "resealed": done})
        return
    for d in done:
        click.echo(f"keyload {d['keyload_id']} (branch {d['branch']}) resealed at sequence(s) "
                   f"{', '.join(map(str, d['sequences']))}")
    click.echo(f"{len(done)} keyload(s) resealed to {', '.join(sorted(to))}")


def publish_confidential(api: ApiClient, who: Account, stream_id: str, publisher_key_file: Path | None, *,
                         branch: str, kind: str, plaintext: bytes, tags: dict[str, TagValue],
                         content_type: str, rekey_on_change: bool = False) -> dict[str, Any]:
    """Mask `plaintext` under the branch's current keyload, which the owner opens from the log, and
    publish it. UNAUTHORIZED when the branch has no keyload the owner can open, and, before anything
    is masked, when that keyload seals to a member who left or to a revoked or superseded account
    key (`ConfidentialPublisher.audience`), unless `rekey_on_change` (then it re-keys first)."""
    branch = require_branch(branch)
    messages = _verified_messages(api, stream_id, None)
    current = current_keyload_summary(messages, branch)
    if current is None:
        raise UnauthorizedError(f"branch {branch!r} of confidential feed {stream_id} has no keyload yet: run "
                                f"`watchtower feed {stream_id} rekey --branch {branch}` first")
    reader = member_reader(who)
    reader.prime(messages)
    keyload = reader.keyload(bytes.fromhex(current["keyload_id"]))
    if keyload is None:
        raise UnauthorizedError(f"the current keyload {current['keyload_id']} of branch {branch!r} is not sealed to "
                                f"this account's keys; run `watchtower feed {stream_id} rekey --branch {branch}`")
    publisher = _owner_publisher(api, who, stream_id, publisher_key_file, branch, rekey_on_change=rekey_on_change)
    publisher.resume(keyload)
    try:
        return publisher.publish(kind, plaintext, tags, content_type)
    except WatchtowerError as exc:
        if exc.code == "UNAUTHORIZED" and "left the allowlist" in exc.message and "rekey --branch" not in exc.message:
            raise UnauthorizedError(f"{exc.message} (`watchtower feed {stream_id} rekey --branch {branch}`)") from None
        raise
