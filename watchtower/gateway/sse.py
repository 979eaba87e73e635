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
goes backwards, and a feed connection never skips one (`sse_connection.ConnectionStream`).

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
import os
from collections.abc import Hashable, Mapping
from typing import Any, Final

import aiohttp
from aiohttp import web
from aiohttp_sse import sse_response

from watchtower.gateway.sse_connection import Connection, ConnectionStream
from watchtower.gateway.sse_events import SEP, EventStream
from watchtower.gateway.tail import Tailer, messages_route, push_route
from watchtower.http import params
from watchtower.http.server import error_response
from watchtower.metrics import http as http_metrics
from watchtower.metrics import sse as sse_metrics
from watchtower.protocol.addresses import require_address
from watchtower.protocol.errors import (
    InvalidArgumentError,
    LimitExceededError,
    NotReadyError,
    WatchtowerError,
)
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.topics.catalogue import topic_name

EVENTS_PATH: Final = "/v1/feeds/{feed_id}/events"


def _env_int(name: str, default: int, minimum: int) -> int:
    try:
        return max(minimum, int(os.environ.get(name, default)))
    except ValueError:
        return default


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
            stream = ConnectionStream(self, conn, feed_id, stream_id, match, filter_spec)
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
