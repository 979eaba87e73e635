"""What every command about one feed shares: the ``feed ID`` group that they join, the ``ID``
reference it passes them, the options of reads and writes, JSON arguments, a message's one-line
rendering and a reply's, and waiting for the read side after a write. `feed_cmd`, `new_feed_cmd`,
`audience_cmd`, `paid_feed_cmd`, `ledger_cmd`, `replay_cmd` and `follow_cmd` build on it and never
on each other's internals."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from watchtower.cli.account_cmd import identity_options, json_option
from watchtower.cli.json_output import echo_json
from watchtower.client.http import DEFAULT_API_URL, ENV_API, ApiClient
from watchtower.client.sdk import wait_until_visible
from watchtower.protocol.errors import RequestTimeoutError
from watchtower.protocol.stream.message import StreamMessage, TagValue

F = TypeVar("F", bound=Callable[..., Any])


def api_option(func: F) -> F:
    """Add ``--api URL`` (received as `api_url`)."""
    return click.option(
        "--api", "api_url", default=None, metavar="URL",
        help=f"Watchtower HTTP API [env {ENV_API}; default {DEFAULT_API_URL}].",
    )(func)


def write_options(func: F) -> F:
    """``--api``, ``--account``, ``--key-file`` and ``--json``: what every signed command takes."""
    return api_option(identity_options(json_option(func)))


def read_options(func: F) -> F:
    """``--api`` and ``--json``: what every read command takes."""
    return api_option(json_option(func))


def parse_json(text: str, option: str) -> Any:
    """`text` parsed as JSON, else a usage error naming `option`."""
    try:
        return json.loads(text)
    except ValueError as err:
        raise click.BadParameter(f"not valid JSON ({err})", param_hint=option) from None


@dataclasses.dataclass
class FeedRef:
    """The ``ID`` given to ``feed``: a feed id (all digits) or a stream id."""

    ref: str

    def resolve(self, api: ApiClient) -> tuple[str, dict[str, Any] | None]:
        """(stream id, registry entry or None); FEED_NOT_FOUND for an unknown feed id."""
        if self.ref.isdigit():
            entry = api.feed(int(self.ref))
            return str(entry["stream_id"]), entry
        return self.ref, None


pass_feed = click.make_pass_decorator(FeedRef)


@click.group("feed")
@click.argument("feed_ref", metavar="ID")
@click.pass_context
def feed(ctx: click.Context, feed_ref: str) -> None:
    """Act on one feed. ID is a feed id (integer) or a stream id."""
    ctx.obj = FeedRef(feed_ref)


def _tag_text(value: TagValue) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def message_line(msg: StreamMessage) -> str:
    """One readable line: sequence, kind, UTC time, tags, and the payload if it is short text."""
    when = datetime.datetime.fromtimestamp(msg.timestamp_unix_ms / 1000, datetime.UTC)
    tags = " ".join(f"{k}={_tag_text(v)}" for k, v in sorted(msg.tags.items()))
    try:
        payload = msg.payload_inline.decode("utf-8") if msg.payload_format == "PLAINTEXT" else None
    except UnicodeDecodeError:
        payload = None
    if payload is None or not payload.isprintable():
        payload = f"<{len(msg.payload_inline)} bytes {msg.payload_format.lower()}>"
    elif len(payload) > 80:
        payload = payload[:79] + "…"
    parts = [f"#{msg.sequence}", msg.kind, when.isoformat(timespec="milliseconds").replace("+00:00", "Z")]
    return "  ".join(p for p in (*parts, tags, payload) if p)


def echo_reply(reply: Mapping[str, Any], as_json: bool, text: str) -> None:
    """A command's reply: as JSON with ``--json``, else the one line `text`."""
    if as_json:
        echo_json(dict(reply))
    else:
        click.echo(text)


def settle(api: ApiClient, stream_id: str, *, feed_id: object = None, signing_key_id: int = 1) -> None:
    """Wait (briefly) until the read side shows an acknowledged write, and say so on stderr if it does
    not: the next command, often a new process, reads from the projections, which trail the writer's
    acknowledgement by a moment, so scripts can chain commands."""
    try:
        wait_until_visible(api, stream_id, signing_key_id=signing_key_id,
                           feed_id=feed_id if isinstance(feed_id, int) else None)
    except RequestTimeoutError as err:
        click.echo(f"note: {err.message}", err=True)
