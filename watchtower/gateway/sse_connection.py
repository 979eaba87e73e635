"""One SSE connection of `gateway.sse`: its bounded buffer of live events, and what it has sent.

`Connection` is where the live tail (`tail.Tailer`) hands a connection its records, on the
connection's own event loop; past ``maxsize`` undelivered events it drops them and is *lagged*.

`ConnectionStream` decides what the connection sends, in order and at most once: it catches up
from the API's ``get_since`` (a ``Last-Event-ID`` or ``cursor`` resume), then forwards the live
tail. A feed connection knows every sequence up to which it is complete (``covered``); a live
sequence further on (a message committed before the tail saw it) is filled from ``get_since``
first (waiting for the projection with ``min_head``), so it never skips one, and a gap that cannot
be filled closes it with ``event: lagged`` naming where to resume. A subscriber's push connection
sends each delivery above the last one sent. An event is formatted once per feed
(`sse_events.encode_event`, cached on the shared `tail.Item`), and everything pending goes out in
one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any, Final, Protocol

from aiohttp_sse import EventSourceResponse

from watchtower.gateway.sse_events import EventStream, encode_event
from watchtower.gateway.tail import Item
from watchtower.metrics import sse as sse_metrics
from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT
from watchtower.protocol.errors import LimitExceededError, SubscriptionNotFoundError, WatchtowerError
from watchtower.protocol.stream.message import StreamMessage

log = logging.getLogger("watchtower.gateway.sse")

GAP_WAIT_MS: Final = 10_000  # how long a gap fill waits for the projection to fold the missing message


class ApiReads(Protocol):
    """The API reads a connection makes (`sse.Api`)."""

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]: ...


class Hub(Protocol):
    """What a connection uses of the hub that serves it (`sse.SseHub`): the API reads, the hub's
    closing, and the lag counters it adds to."""

    @property
    def api(self) -> ApiReads: ...

    closing: asyncio.Event
    lagged: int
    max_queued: int


class Connection:
    """One SSE connection's bounded buffer of live events, filled by a tailer on this loop."""

    def __init__(self, hub: Hub, maxsize: int) -> None:
        self.hub = hub
        self.loop = asyncio.get_running_loop()
        self.maxsize = maxsize
        self.items: deque[Item] = deque()
        self.wake = asyncio.Event()
        self.lagged = False

    def offer(self, items: list[Item]) -> None:
        if self.lagged:
            return
        if len(self.items) + len(items) > self.maxsize:
            # Too far behind: drop what is buffered (memory stays bounded) and close with `lagged`.
            self.lagged = True
            self.items.clear()
            self.hub.lagged += 1
        else:
            self.items.extend(items)
            self.hub.max_queued = max(self.hub.max_queued, len(self.items))
        self.wake.set()

    def take(self) -> list[Item]:
        out = sorted(self.items, key=lambda item: item.sequence)
        self.items.clear()
        self.wake.clear()
        return out


class ConnectionStream:
    """What one connection has sent and how it catches up; `start_*` run before the response starts."""

    def __init__(self, hub: Hub, conn: Connection, feed_id: int, stream_id: str, match: Any,
                 filter_spec: object) -> None:
        self.hub, self.conn, self.feed_id, self.stream_id = hub, conn, feed_id, stream_id
        self.match, self.filter_spec = match, filter_spec
        self.push = False
        self.match_all = filter_spec is None  # no filter: skip evaluating one per event
        self.covered = 0  # feed mode: every sequence up to here was sent or filtered out
        self.last_sent: int | None = None
        self.pending: list[dict[str, Any]] = []  # the first catch-up page, read before the response
        self.resume = False  # a cursor was given: catch up first
        self._page_end = (0, 0)  # (next_cursor, head_sequence) of the last page read
        self._sid_json = json.dumps(stream_id)
        self._out: list[bytes] = []  # events queued for the next write (at most one batch or one page)

    async def start_feed(self, cursor: int | None) -> None:
        if cursor is None:  # live: what comes after the head as it is now
            head = await self.hub.api.get(f"/v1/streams/{self.stream_id}/head")
            self.covered = int(head.get("head_sequence") or 0)
        else:
            self.covered, self.resume = cursor, True
            self.pending = await self._page(cursor, self.filter_spec, None)  # CURSOR_TOO_OLD shows here

    async def start_push(self, subscriber: str, cursor: int | None) -> None:
        self.push = True
        if cursor is None:
            return
        subs = await self.hub.api.get(f"/v1/streams/{self.stream_id}/subscribers")
        mine = [s for s in subs.get("subscribers", []) if s.get("subscriber") == subscriber]
        if not mine:
            raise SubscriptionNotFoundError(f"{subscriber} has no subscription to {self.stream_id}; subscribe "
                                            "first, or connect without subscriber= to follow the feed")
        sub = mine[0]
        self.last_sent, self.resume = cursor, True
        # Only what was pushable to this subscriber: after it subscribed, through its own filter.
        self.covered = max(cursor, int(sub.get("created_at_sequence") or 0))
        filter_json = sub.get("filter_json")
        self.filter_spec = None if filter_json is None else json.loads(filter_json)
        self.pending = await self._page(self.covered, self.filter_spec, None)

    async def _page(self, cursor: int, filter_spec: object, min_head: int | None) -> list[dict[str, Any]]:
        query = {"cursor": str(cursor), "limit": str(MAX_GET_SINCE_LIMIT)}
        if filter_spec is not None:
            query["filter"] = json.dumps(filter_spec)
        if min_head is not None:
            query.update(min_head=str(min_head), wait_ms=str(GAP_WAIT_MS))
        page = await self.hub.api.get(f"/v1/streams/{self.stream_id}/messages", query)
        self._page_end = (int(page.get("next_cursor") or cursor), int(page.get("head_sequence") or 0))
        return list(page.get("messages", []))

    def _queue(self, item: Item) -> None:
        """Queue `item`'s event for the next `_flush`, unless it would repeat or go backwards."""
        if self.last_sent is not None and item.sequence <= self.last_sent:
            return  # never twice, never backwards
        event = item.events.get(self.feed_id)
        if event is None:  # the first connection of this feed to send the record formats it for all
            # The envelope around the message JSON, built as text: json.dumps of the ids is the same JSON.
            data = (f'{{"feed_id":{self.feed_id},"stream_id":{self._sid_json},"sequence":{item.sequence},'
                    f'"message":{item.text}}}')
            event = item.events[self.feed_id] = encode_event(data, id=str(item.sequence), event="message")
        self._out.append(event)
        self.last_sent = item.sequence

    async def _flush(self, resp: EventStream) -> None:
        """Write every queued event in one write (the client sees them in the order queued)."""
        if self._out:
            payload = b"".join(self._out)
            sse_metrics.EVENTS.inc(len(self._out))
            self._out.clear()
            await resp.send_encoded(payload)

    async def _catch_up(self, resp: EventStream, until: int | None) -> None:
        """Send the pending page and the next ones until the head (or `until`) is covered."""
        messages, self.pending = self.pending, []
        while True:
            for m in messages:
                # Checked as any message is (from_json_dict), before it is sent.
                self._queue(Item.of(StreamMessage.from_json_dict(m)))
            await self._flush(resp)
            next_cursor, head = self._page_end
            advanced = next_cursor > self.covered
            self.covered = max(self.covered, next_cursor)
            if self.covered >= (head if until is None else until) or not advanced or self.conn.lagged:
                return
            messages = await self._page(self.covered, self.filter_spec, until)

    async def run(self, resp: EventStream) -> None:
        """Catch up, then forward the live tail until the client goes, lags, or the server stops."""
        if self.resume:
            await self._catch_up(resp, None)
        conn, hub = self.conn, self.hub
        while not hub.closing.is_set() and resp.is_connected():
            if conn.lagged:
                await self._lagged(resp)
                return
            if not conn.items:
                # Until the tail offers more, or the hub's ticker wakes us (about once a second) to
                # look at the client and the server again.
                conn.wake.clear()
                await conn.wake.wait()
                continue
            for item in conn.take():
                sequence = item.sequence
                if self.push:
                    self._queue(item)
                    continue
                if sequence <= self.covered:
                    continue  # sent (or filtered out) by a catch-up already
                if sequence > self.covered + 1:  # committed before the tail saw it: fill from the API
                    await self._flush(resp)
                    await self._fill(resp, sequence - 1)
                if sequence == self.covered + 1:
                    if self.match_all or self.match(item.message.headers()):
                        self._queue(item)
                    self.covered = sequence
                if conn.lagged:
                    break
            await self._flush(resp)  # the whole batch in one write

    async def _fill(self, resp: EventStream, until: int) -> None:
        try:
            self.pending = await self._page(self.covered, self.filter_spec, until)
            await self._catch_up(resp, until)
        except WatchtowerError as err:  # e.g. CURSOR_TOO_OLD: the gap left the window meanwhile
            log.warning("feed %s: could not fill a gap after %s: %s", self.feed_id, self.covered, err)
        if self.covered < until and not self.conn.lagged:
            self.conn.lagged = True  # say where to resume from rather than skip a sequence
            self.hub.lagged += 1

    async def _lagged(self, resp: EventSourceResponse) -> None:
        resume = self.last_sent if self.last_sent is not None else self.covered
        data = {"code": LimitExceededError.CODE,
                "message": f"this connection fell more than {self.conn.maxsize} events behind and is closed; "
                           f"reconnect with Last-Event-ID: {resume}"}
        # A client that is gone or stalled gets nothing more: closing is all that is left.
        with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
            await resp.send(json.dumps(data, separators=(",", ":")), event="lagged")
