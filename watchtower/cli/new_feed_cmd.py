"""Making a feed and reading the registry from the command line: ``new feed``, ``list`` and ``feeds``.

``new feed`` creates a stream owned by your account and lists it in the registry (its options are
the stream's config, `feed_config`; `ingest_cmd` adds the ingestion ones). Its publisher key is
fresh unless given, and is stored as ``$WATCHTOWER_HOME/publishers/<stream_id>.key`` before the
stream exists, so no created feed is ever left without its key. ``list`` shows every feed,
``feeds`` one owner's. Every command takes ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import nacl.signing

from watchtower.cli.account_cmd import echo_table, identity_options, load_account
from watchtower.cli.feed_config import POLICIES, stream_config_fields
from watchtower.cli.feed_group import read_options, settle, write_options
from watchtower.cli.json_output import echo_json
from watchtower.client import account as keys
from watchtower.client.http import ApiClient
from watchtower.client.sdk import create_feed, new_stream_id
from watchtower.protocol.addresses import require_address
from watchtower.protocol.errors import RequestTimeoutError, WatchtowerError


def _short(address: object) -> str:
    text = str(address or "")
    return text if len(text) <= 14 else f"{text[:10]}…{text[-4:]}"


def _feed_rows(feeds: list[dict[str, Any]]) -> list[tuple[object, ...]]:
    return [(f["feed_id"], f["name"], f["stream_id"], _short(f["owner"]), f.get("description", "")) for f in feeds]


@click.group("new")
def new() -> None:
    """Create things (`new feed`)."""


@new.command("feed")
@click.option("--name", required=True, help="Feed name shown in the registry (1-64 characters).")
@click.option("--description", default="", help="One-line description (up to 280 characters).")
@click.option("--access-mode", type=click.Choice(["open", "subscriber-paid", "platform-managed"]), default="open",
              show_default=True, help="open: plaintext for everyone; subscriber-paid: encrypted, paid per key epoch.")
@click.option("--paid", is_flag=True, help="A paid feed: the same as --access-mode platform-managed.")
@click.option("--content-cipher", type=click.Choice(["XCHACHA20_POLY1305"]), default=None,
              help="Paid feeds: the payload cipher (the only CIP-7 v1 value).")
@click.option("--key-scope", type=click.Choice(["ACCOUNT"]), default=None,
              help="Paid feeds: who epoch keys are sealed to (the only CIP-7 v1 value).")
@click.option("--fee-per-epoch-cby", type=click.IntRange(min=1), default=None, help="Paid feeds: CBY per key epoch.")
@click.option("--protocol-fee-bps", type=click.IntRange(0, 5000), default=None, help="Paid feeds: protocol fee.")
@click.option("--key-epoch-blocks", type=click.IntRange(min=1), default=None, help="Paid feeds: blocks per key epoch.")
@click.option("--min-purchase-epochs", type=click.IntRange(min=1), default=None, help="Paid feeds: minimum purchase.")
@click.option("--publisher-treasury", default=None, metavar="ADDR", help="Paid feeds: fee recipient (default: you).")
@click.option("--ring-buffer-capacity", type=click.IntRange(min=1), default=None, help="Messages retained.")
@click.option("--max-subscribers", type=click.IntRange(min=1), default=None, help="Subscription cap.")
@click.option("--policy", type=click.Choice(list(POLICIES)), default=None, help="Who may subscribe (default public).")
@click.option("--confidential", is_flag=True, default=False,
              help="With --policy private-allowlist: every message must be masked under the current keyload.")
@click.option("--max-push-deliveries-per-block", type=click.IntRange(min=1), default=None)
@click.option("--max-push-cycles-per-block", type=click.IntRange(min=1), default=None)
@click.option("--publisher-key-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Sign messages with this key instead of a fresh one.")
@click.option("--stream-id", default=None, help="Stream id to create (default: a fresh random one).")
@write_options
def new_feed(api_url: str | None, account: str | None, key_file: Path | None, as_json: bool,
             publisher_key_file: Path | None, stream_id: str | None, **opts: Any) -> None:
    """Create a feed (a stream listed in the registry) owned by your account; prints its feed id."""
    owner = load_account(account, key_file)
    name, description = opts.pop("name"), opts.pop("description")
    config = stream_config_fields(owner.address, opts)
    sid = stream_id or new_stream_id()
    publisher = (keys.read_key_file(publisher_key_file) if publisher_key_file
                 else nacl.signing.SigningKey.generate())
    # Stored before the stream exists, so no created feed is ever left without its key.
    key_path = keys.save_publisher_key(sid, publisher)
    api = ApiClient(api_url)
    try:
        reply = create_feed(api, owner, name=name, description=description, stream_id=sid,
                            publisher_key_hex=bytes(publisher.verify_key).hex(), **config)
    except RequestTimeoutError:
        click.echo(f"the creation may still complete; the publisher key stays at {key_path}", err=True)
        raise
    except WatchtowerError:
        key_path.unlink(missing_ok=True)
        raise
    settle(api, sid, feed_id=reply.get("feed_id"))
    if as_json:
        echo_json({**reply, "publisher_key_file": str(key_path)})
        return
    click.echo(f"feed {reply.get('feed_id')} created (stream {reply.get('stream_id', sid)})")
    click.echo(f"publisher key saved to {key_path}")


@click.command("list")
@read_options
def list_feeds(api_url: str | None, as_json: bool) -> None:
    """List every feed in the registry."""
    feeds = ApiClient(api_url).feeds()
    if as_json:
        echo_json({"feeds": feeds})
        return
    echo_table(("FEED", "NAME", "STREAM", "OWNER", "DESCRIPTION"), _feed_rows(feeds),
               empty="no feeds yet; create one with `watchtower new feed --name NAME`")


@click.command("feeds")
@click.option("--owner", default=None, metavar="ADDR", help="Owner address (default: your account's).")
@identity_options
@read_options
def feeds_by_owner(owner: str | None, account: str | None, key_file: Path | None, api_url: str | None,
                   as_json: bool) -> None:
    """List the feeds one owner registered (default: yours)."""
    address = require_address(owner, "--owner") if owner else load_account(account, key_file).address
    feeds = ApiClient(api_url).feeds(owner=address)
    if as_json:
        echo_json({"owner": address, "feeds": feeds})
        return
    echo_table(("FEED", "NAME", "STREAM", "OWNER", "DESCRIPTION"), _feed_rows(feeds),
               empty=f"{address} owns no feeds")
