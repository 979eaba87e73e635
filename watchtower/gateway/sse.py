"""``GET /v1/feeds/{feed_id}/events``: a feed's messages, or a subscriber's pushes, as Server-Sent Events.

Served by the standalone gateway and by the API (docs/sse.md). `aiohttp-sse` writes the protocol;
each message is one event ``id: <sequence>`` / ``event: message`` / ``data: <one line of JSON>``
(``{"feed_id", "stream_id", "sequence", "message": StreamMessage.to_json_dict()}``), and a comment
ping keeps an idle connection alive every ``WATCHTOWER_SSE_HEARTBEAT_S`` seconds.

Sources. Live records come from one `tail.Tailer` per topic per process: ``messages`` keyed by stream
id, or ``deliveries`` (``wt:push`` records only) keyed by ``(subscriber, stream id)`` with
``subscriber=``. Everything older comes from the API's ``get_since`` (``WATCHTOWER_API_URL``),
page by page: a ``Last-Event-ID`` (or ``cursor``) resume, and any gap the live tail shows (a
message committed before the tail saw it). So a connection never sends a sequence twice and never
goes backwards, and a feed connection never skips one.

Cost. An event is formatted once per feed, not once per connection (`encode_event`, cached on the
tail's shared `tail.Item`), and a connection writes everything it has pending in one write
(`EventStream.send_encoded`, with aiohttp-sse's send timeout and abort for a stalled client),
not one `send` and one drain per event.

Bounds. A connection keeps at most ``WATCHTOWER_SSE_QUEUE`` undelivered events; a reader that falls
further behind gets one ``event: lagged`` (LIMIT_EXCEEDED, naming the Last-Event-ID to resume from)
and is closed. A process serves at most ``WATCHTOWER_SSE_MAX_CONNECTIONS`` connections; past that a
request is refused with LIMIT_EXCEEDED and HTTP 503. Every refusal before the stream starts is the
API's JSON error with its spec code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any, Final

import aiohttp
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from watchtower.gateway.sse_events import SEP, EventStream, encode_event
from watchtower.gateway.tail import Item, Tailer, messages_route, push_route
from watchtower.http import params
from watchtower.http.server import error_response
from watchtower.metrics import http as http_metrics
from watchtower.metrics import sse as sse_metrics
from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT
from watchtower.protocol.errors import (
    InvalidArgumentError,
    LimitExceededError,
    NotReadyError,
    SubscriptionNotFoundError,
    WatchtowerError,
)
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.message import StreamMessage
from watchtower.topics.catalogue import topic_name

log = logging.getLogger("watchtower.gateway.sse")

EVENTS_PATH: Final = "/v1/feeds/{feed_id}/events"
GAP_WAIT_MS: Final = 10_000  # how long a gap fill waits for the projection to fold the missing message


def _env_int(name: str, default: int, minimum: int) -> int:
    try:
        return max(minimum, int(os.environ.get(name, default)))
    except ValueError:
        return default


class Connection:
    """One SSE connection's bounded buffer of live events, filled by a tailer on this loop."""

    def __init__(self, hub: SseHub, maxsize: int) -> None:
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


class Api:
    """The few API reads a connection needs, over HTTP (the gateway holds no projection)."""

    def __init__(self, base_url: str | None) -> None:
        self.base_url = (base_url or "").rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        if not self.base_url:
            raise NotReadyError("this gateway does not know the API (set WATCHTOWER_API_URL); use the API's own "
                                "/v1/feeds/{id}/events or pull with get_since")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        try:
            async with self._session.get(self.base_url + path, params=query) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise NotReadyError(f"the API at {self.base_url} did not answer ({type(exc).__name__}); "
                                "retry in a moment") from None
        if resp.status != 200:
            error = body.get("error") if isinstance(body, dict) else None
            if isinstance(error, dict):
                raise WatchtowerError.from_dict(error)
            raise NotReadyError(f"the API answered HTTP {resp.status}; retry in a moment")
        if not isinstance(body, dict):
            raise NotReadyError("the API answered something that is not a JSON object; retry in a moment")
        return body

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class SseHub:
    """The route, its tailers and its counters; one per process (`mount` it on an aiohttp app)."""

    def __init__(self, bootstrap: str, *, prefix: str | None = None, api_url: str | None = None) -> None:
        self.api = Api(api_url if api_url is not None else os.environ.get("WATCHTOWER_API_URL"))
        self.tailers = {"messages": Tailer(bootstrap, topic_name("messages", prefix), messages_route),
                        "deliveries": Tailer(bootstrap, topic_name("deliveries", prefix), push_route)}
        self.heartbeat_s = _env_int("WATCHTOWER_SSE_HEARTBEAT_S", 15, 1)
        self.queue_size = _env_int("WATCHTOWER_SSE_QUEUE", 1024, 1)
        self.max_connections = _env_int("WATCHTOWER_SSE_MAX_CONNECTIONS", 1000, 0)
        self.connections = 0
        self.lagged = 0
        self.max_queued = 0
        self.closing = asyncio.Event()
        self._open: set[Connection] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._starting: dict[str, asyncio.Future[None]] = {}
        sse_metrics.track(self)

    def stats(self) -> dict[str, int]:
        """Counters for health: open connections, lagged closes, the largest buffer seen."""
        return {"connections": self.connections, "lagged": self.lagged, "max_queued": self.max_queued,
                "queue_size": self.queue_size, "max_connections": self.max_connections}

    def mount(self, app: web.Application) -> None:
        """Add the route to `app` (before it starts); connections end and tails stop with it."""
        app.router.add_get(EVENTS_PATH, self.handle, name="feed_events")
        http_metrics.install(app)  # the app's requests by route (watchtower.metrics.http)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    def _watch(self, conn: Connection) -> None:
        """Count `conn` open, and make sure the ticker that wakes idle connections runs."""
        self._open.add(conn)
        loop = asyncio.get_running_loop()
        if self._ticker is None or self._ticker.done() or self._ticker.get_loop() is not loop:
            self._ticker = loop.create_task(self._tick())

    async def _tick(self) -> None:
        """Wake every open connection once a second while there are any, so an idle one notices a
        client gone or a shutdown: one timer for all of them, not one per wait of each."""
        while self._open:
            await asyncio.sleep(1.0)
            for conn in list(self._open):
                conn.wake.set()

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.closing.set()
        for conn in list(self._open):
            conn.wake.set()

    async def _on_cleanup(self, _app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, t.stop) for t in self.tailers.values()))
        await self.api.close()
        if self._ticker is not None:
            self._ticker.cancel()

    async def _tailer(self, kind: str) -> Tailer:
        tailer = self.tailers[kind]
        if not tailer.running:
            starting = self._starting.get(kind)
            if starting is None or (starting.done() and starting.exception() is not None):
                starting = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, tailer.start))
                self._starting[kind] = starting
            try:
                await asyncio.shield(starting)
            except Exception as exc:
                raise NotReadyError(f"the live tail of {tailer.topic} could not start ({type(exc).__name__}); "
                                    "retry in a moment") from None
        return tailer

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The aiohttp handler: check everything, then stream (errors before the stream are JSON)."""
        try:
            return await self._handle(request)
        except WatchtowerError as err:
            return error_response(err)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        feed_id = params.int_text(request.match_info["feed_id"], "feed_id", minimum=1)
        q = request.query
        subscriber = q.get("subscriber") or None
        if subscriber is not None:  # an address, or the request is malformed (not an empty stream)
            require_address(subscriber, "subscriber")
        filter_spec = params.filter_param(q)
        if subscriber is not None and filter_spec is not None:
            raise InvalidArgumentError("filter applies to a feed's messages only; a subscriber's pushes are "
                                       "already filtered by its subscription, so drop one of the two")
        match = compile_filter(parse_filter(filter_spec))  # INVALID_FILTER before anything else
        cursor = _cursor(request)
        # heartbeat_s may only lower the server's interval (a client cannot make pings rarer).
        heartbeat = min(self.heartbeat_s, params.int_param(q, "heartbeat_s", self.heartbeat_s, minimum=1))
        if self.closing.is_set():
            raise NotReadyError("this server is shutting down; reconnect (to another one) with Last-Event-ID")
        if self.connections >= self.max_connections:
            return error_response(LimitExceededError(
                f"this server already streams {self.connections} connections (the cap is {self.max_connections}); "
                "retry later, or pull with get_since meanwhile"), 503)
        self.connections += 1  # the slot is taken before the first await
        try:
            return await self._serve(request, feed_id, subscriber, match, filter_spec, cursor, heartbeat)
        finally:
            self.connections -= 1

    async def _serve(self, request: web.Request, feed_id: int, subscriber: str | None, match: Any,
                     filter_spec: object, cursor: int | None, heartbeat: int) -> web.StreamResponse:
        stream_id = str((await self.api.get(f"/v1/feeds/{feed_id}"))["stream_id"])
        tailer = await self._tailer("deliveries" if subscriber else "messages")
        key: Hashable = (subscriber, stream_id) if subscriber else stream_id
        conn = Connection(self, self.queue_size)
        tailer.register(key, conn)  # before the catch-up reads, so nothing falls between the two
        self._watch(conn)
        try:
            stream = _Stream(self, conn, feed_id, stream_id, match, filter_spec)
            if subscriber is not None:
                await stream.start_push(subscriber, cursor)
            else:
                await stream.start_feed(cursor)
            async with sse_response(request, sep=SEP, ping_interval=heartbeat, response_cls=EventStream,
                                    headers={"X-Accel-Buffering": "no"}) as resp:
                # The client went away, or stalled past the send timeout (aiohttp-sse aborted it): done.
                with contextlib.suppress(ConnectionError, TimeoutError):
                    await stream.run(resp)
            return resp
        finally:
            self._open.discard(conn)
            tailer.unregister(key, conn)


def _cursor(request: web.Request) -> int | None:
    """``Last-Event-ID`` (it wins) or the ``cursor`` query parameter; None for a live start."""
    header = request.headers.get("Last-Event-ID")
    # The value exactly as HTTP delivers it (the parser already dropped the optional SP/HTAB
    # around it): no further stripping, so other spaces, signs and "-0" are refused by `int_text`.
    if header is not None and header != "":
        return params.int_text(header, "Last-Event-ID")
    text = request.query.get("cursor")
    return None if text is None or text == "" else params.int_text(text, "cursor")


class _Stream:
    """What one connection has sent and how it catches up; `start_*` run before the response starts."""

    def __init__(self, hub: SseHub, conn: Connection, feed_id: int, stream_id: str, match: Any,
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
