"""Following a feed live from the command line: ``feed ID follow`` and ``feed ID subscribe --follow``.

Messages come through Server-Sent Events (``/v1/feeds/{id}/events`` on the API or on a gateway,
`client.sse.SseSource`) and, in push-with-pull-fallback mode, through get_since as well: at once
from the cursor, every few seconds, whenever the events show a gap, and continuously while the
event stream is down or stalled (`client.stream_modes`). Every printed message is verified against
the stream's owner-signed key chain, printed once, in ascending order, without gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from watchtower.cli.feed_group import message_line
from watchtower.cli.json_output import echo_json
from watchtower.client.http import ApiClient
from watchtower.client.stream_modes import StreamStats
from watchtower.client.subscriber import Subscriber

if TYPE_CHECKING:  # httpx, which the event stream reads with, costs every CLI command a second to import
    from watchtower.client.sse import SseSource

F = TypeVar("F", bound=Callable[..., Any])


def follow_options(func: F) -> F:
    """What following a feed live takes: the event source, when to stop, how often to pull."""
    for option in reversed((
        click.option("--gateway", "gateway_url", default=None, metavar="URL",
                     help="Serve events from this gateway (default: the API, which serves them too)."),
        click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after this many messages."),
        click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
                     help="Stop when no message arrived for S seconds (default: never)."),
        click.option("--pull-interval", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
                     metavar="S", help="Catch up with get_since every S seconds, events or not."),
        click.option("--heartbeat", type=click.IntRange(min=1), default=None, metavar="S",
                     help="Ask the event stream for a heartbeat every S seconds (default: the server's, 15)."),
    )):
        func = option(func)
    return func


def feed_id_of(api: ApiClient, stream_id: str, entry: Mapping[str, Any] | None) -> int | None:
    """The registry id of `stream_id` (None for a stream that is not listed as a feed)."""
    if entry is not None and isinstance(entry.get("feed_id"), int):
        return int(entry["feed_id"])
    found = api.stream_info(stream_id).get("feed_id")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def follow_feed(api: ApiClient, subscriber: Subscriber, feed_id: int | None, *, mode: str, gateway_url: str | None,
                subscriber_address: str | None, as_json: bool, count: int | None, idle_timeout_s: float | None,
                pull_interval_s: float, heartbeat_s: float | None = None) -> None:
    """Print `subscriber`'s verified messages as they arrive, in `mode`, until `count` or idle/Ctrl-C."""
    subscriber.key_schedule()  # a key chain that does not verify fails before anything is printed
    source: SseSource | None = None
    if mode != "pull":
        if feed_id is None:
            if mode == "push":
                raise click.UsageError(f"stream {subscriber.stream_id} is not listed as a feed, so it has no event "
                                       "stream; follow it with --mode pull")
            click.echo(f"note: stream {subscriber.stream_id} is not listed as a feed; following by pull", err=True)
            mode = "pull"
        else:
            from watchtower.client.sse import SseSource

            # With pulls, live from now: what lies between the cursor and the live tail is pulled (a
            # gap pull). Push alone resumes from the cursor, so nothing pushed before the connection
            # opened is lost.
            source = SseSource(gateway_url or api.base_url, feed_id, subscriber=subscriber_address,
                               filter=None if subscriber_address else subscriber.filter, heartbeat_s=heartbeat_s,
                               last_event_id=subscriber.cursor if mode == "push" else None)
    printed = 0
    try:
        for msg in subscriber.stream(mode, source, pull_interval_s=pull_interval_s, idle_timeout_s=idle_timeout_s):
            if as_json:
                echo_json(msg.to_json_dict(), line=True)
            else:
                click.echo(message_line(msg))
            printed += 1
            if count is not None and printed >= count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        if source is not None:
            source.close()
    _summary(subscriber.stream_stats, printed, source, subscriber.cursor)


def _summary(stats: StreamStats | None, printed: int, source: SseSource | None, cursor: int) -> None:
    if stats is None:
        return
    via = f"{stats.pushed} live, {stats.pulled} pulled" if source is not None else f"{stats.pulled} pulled"
    extra = ""
    if source is not None and (source.stats.reconnects or stats.source_errors):
        extra = f"; event stream reconnects {source.stats.reconnects}, failures {stats.source_errors}"
    click.echo(f"{printed} verified message(s) ({via}; {stats.duplicates} duplicate(s) dropped{extra}); "
               f"resume with --cursor {cursor}", err=True)
