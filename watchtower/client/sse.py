"""`SseSource`: a feed's live messages (or one subscriber's pushes) over Server-Sent Events.

Reads ``GET /v1/feeds/{feed_id}/events`` of the HTTP API or of a standalone gateway (docs/push.md)
with httpx and httpx-sse. Each ``message`` event carries one StreamMessage; the event id is its
sequence. A background thread holds the connection and feeds a bounded queue; `poll` takes from it,
so the application's loop never blocks on the network for longer than it asks to.

The connection is kept alive across failures:

- a dropped connection, a refused connect, a 5xx or a 503 LIMIT_EXCEEDED (too many connections)
  is retried after a back-off (`reconnect_delay_s`, doubling up to `max_reconnect_delay_s`), with
  ``Last-Event-ID`` = the highest sequence received, so the server resends only what came after;
- the reader may say what it already holds (`resume_after`, which ``Subscriber.stream`` calls with
  its cursor): a reconnect then resumes after the higher of that and the last event received. A
  connection that started live and dropped before its first event (a gateway killed before the
  first push reached this subscriber) so resumes from the reader's cursor, and the server resends
  what was pushed while it was down, instead of starting live again and losing it;
- a ``lagged`` event (this client fell behind the server's per-connection queue) closes the
  connection and reconnects at once with ``Last-Event-ID``;
- silence (no event and no heartbeat) for `stall_timeout_s` counts as a stalled connection and is
  reconnected the same way (heartbeats are SSE comments: they only reset the read timer);
- CURSOR_TOO_OLD (the resume point fell out of the ring window) reconnects live, without
  ``Last-Event-ID``: the skipped range is the pull side's to recover (``Subscriber.stream``); a
  `resume_after` point at or below the refused one is ignored from then on;
- any other error answer (FEED_NOT_FOUND, INVALID_FILTER, INVALID_ARGUMENT, 404 of a server
  without the route) is permanent: `poll` raises it and the source stops.

An event whose data is not a message of the feed is counted in `stats.undecodable` and skipped.
Messages are not verified, ordered or deduplicated here: ``Subscriber.stream`` does that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import queue
import socket
import threading
import time
from typing import Any, Final

import httpx
from httpx_sse import EventSource, SSEError, connect_sse

from watchtower.protocol.errors import CursorTooOldError, LimitExceededError, MalformedRecordError, WatchtowerError
from watchtower.protocol.stream.message import StreamMessage

log = logging.getLogger(__name__)

DEFAULT_QUEUE: Final = 1024
DEFAULT_HEARTBEAT_S: Final = 15.0


@dataclasses.dataclass
class SseStats:
    """What an SseSource has seen so far."""

    received: int = 0  #: message events decoded and queued
    connects: int = 0  #: connections that started streaming
    reconnects: int = 0  #: connection attempts after the first
    lagged: int = 0  #: `lagged` events (this client fell behind; it resumed with Last-Event-ID)
    stalls: int = 0  #: connections closed for silence longer than the stall timeout
    cursor_too_old: int = 0  #: resume points outside the ring window (resumed live)
    undecodable: int = 0  #: events whose data is not a message of this feed


class SseSource:
    """The ``message`` events of feed `feed_id` at `api_or_gateway_url`, as StreamMessages.

    `subscriber`: stream that address's push deliveries instead of the feed's messages;
    `filter`: the filter DSL (without `subscriber` only); `last_event_id`: resume after this
    sequence (None: start live); `heartbeat_s`: ask the server for this heartbeat period (min 1);
    `stall_timeout_s`: reconnect after this much silence (default 2.5 × the heartbeat + 1 s);
    `queue_size`: messages buffered for `poll` (the reader waits, so the server sees back-pressure).
    The connection starts at once; `close` (or the context manager) stops it.
    """

    def __init__(self, api_or_gateway_url: str, feed_id: int, *, subscriber: str | None = None,
                 last_event_id: int | None = None, filter: Any = None, heartbeat_s: float | None = None,
                 stall_timeout_s: float | None = None, queue_size: int = DEFAULT_QUEUE,
                 reconnect_delay_s: float = 0.2, max_reconnect_delay_s: float = 5.0) -> None:
        self.url = f"{api_or_gateway_url.rstrip('/')}/v1/feeds/{int(feed_id)}/events"
        self.feed_id = int(feed_id)
        self.params: dict[str, str] = {}
        if subscriber is not None:
            self.params["subscriber"] = subscriber
        if filter is not None:
            self.params["filter"] = json.dumps(filter, separators=(",", ":"))
        if heartbeat_s is not None:
            self.params["heartbeat_s"] = str(max(1, int(heartbeat_s)))
        period = float(heartbeat_s) if heartbeat_s is not None else DEFAULT_HEARTBEAT_S
        self.stall_timeout_s = stall_timeout_s if stall_timeout_s is not None else 2.5 * period + 1.0
        self.reconnect_delay_s = reconnect_delay_s
        self.max_reconnect_delay_s = max_reconnect_delay_s
        self.stats = SseStats()
        self.last_event_id = last_event_id
        # What the reader holds (`resume_after`), and the highest resume point refused as too old.
        self._reader_cursor: int | None = None
        self._too_old_at: int | None = None
        self._queue: queue.Queue[StreamMessage] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._error: WatchtowerError | None = None
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, name=f"sse-feed-{feed_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ application side
    def __enter__(self) -> SseSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def healthy(self) -> bool:
        """True while a connection is streaming (False while reconnecting, failed or closed)."""
        return self._connected.is_set() and self._error is None and not self._stop.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        """Wait until a connection streams (True) or `timeout_s` passes (False); raises a permanent error."""
        deadline = time.monotonic() + timeout_s
        while not self._connected.wait(0.05):
            self._raise_error()
            if time.monotonic() >= deadline:
                return False
        return True

    def resume_after(self, sequence: int) -> None:
        """The reader holds every message up to `sequence` (its cursor): a reconnect resumes after the
        higher of it and the last event received, even when no event was received yet.

        Call it again as the cursor moves (``Subscriber.stream`` does, every round); a lower value
        than before, or one at or below a resume point the server refused as CURSOR_TOO_OLD, is ignored.
        """
        if sequence < 0 or (self._too_old_at is not None and sequence <= self._too_old_at):
            return
        if self._reader_cursor is None or sequence > self._reader_cursor:
            self._reader_cursor = sequence

    def resume_point(self) -> int | None:
        """The ``Last-Event-ID`` the next connection sends (None: it starts live).

        The first connection starts where it was asked to (`last_event_id`); once one has streamed,
        a reconnect resumes after the last event received or the reader's cursor, whichever is higher.
        """
        last, cursor = self.last_event_id, self._reader_cursor
        if cursor is None or (last is None and self.stats.connects == 0):
            return last
        return cursor if last is None else max(last, cursor)

    def poll(self, timeout_s: float = 0.5) -> list[StreamMessage]:
        """The messages received within `timeout_s` (possibly none), in arrival order.

        Raises the permanent error that stopped the source (see the module docstring).
        """
        self._raise_error()
        out: list[StreamMessage] = []
        try:
            out.append(self._queue.get(timeout=max(0.0, timeout_s)))
        except queue.Empty:
            self._raise_error()
            return out
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Stop reading and drop the connection (idempotent)."""
        self._stop.set()
        response = self._response
        if response is not None:
            # Closing the response does not wake a read blocked in another thread (it would wait for
            # the next heartbeat); shutting the socket down does, so close() returns at once.
            _shutdown_socket(response)
            try:
                response.close()
            except Exception:  # closing from another thread may race the reader; either way it ends
                log.debug("closing the SSE response raced its reader")
        self._thread.join(timeout=self.stall_timeout_s + 5)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------ reader thread
    def _run(self) -> None:
        delay = self.reconnect_delay_s
        timeout = httpx.Timeout(10.0, read=self.stall_timeout_s)
        with httpx.Client(timeout=timeout) as client:
            first = True
            while not self._stop.is_set():
                if not first:
                    self.stats.reconnects += 1
                first = False
                try:
                    streamed = self._connect_once(client)
                except _PermanentError as err:
                    self._error = err.error
                    log.warning("SSE %s stopped: %s", self.url, err.error)
                    return
                self._connected.clear()
                if streamed:
                    delay = self.reconnect_delay_s  # it worked for a while: retry quickly
                if self._stop.wait(delay):
                    return
                delay = min(self.max_reconnect_delay_s, delay * 2)

    def _connect_once(self, client: httpx.Client) -> bool:
        """One connection, read until it ends; True when it streamed at all."""
        resume = self.resume_point()
        headers = {} if resume is None else {"Last-Event-ID": str(resume)}
        try:
            with connect_sse(client, "GET", self.url, params=self.params, headers=headers) as source:
                self._response = source.response
                if source.response.status_code != 200:
                    self._refused(source.response, resume)
                    return False
                self._connected.set()
                self.stats.connects += 1
                self._read(source)
                return True
        except _PermanentError:
            raise
        except httpx.ReadTimeout:
            self.stats.stalls += 1
            log.info("SSE %s silent for %.0fs: reconnecting", self.url, self.stall_timeout_s)
            return True
        except (httpx.HTTPError, SSEError, OSError) as err:
            if not self._stop.is_set():
                log.info("SSE %s failed (%s): reconnecting", self.url, err)
            return self._connected.is_set()
        finally:
            self._response = None

    def _refused(self, response: httpx.Response, resume: int | None) -> None:
        """An answer that is not a stream: decide whether to retry (return) or stop (_PermanentError)."""
        response.read()
        error = _error_of(response)
        if isinstance(error, CursorTooOldError):
            self.stats.cursor_too_old += 1
            log.warning("SSE %s: resume point %s is out of the window; resuming live", self.url, resume)
            self.last_event_id = None
            if resume is not None:
                # The reader's cursor is as old: never resume from it (or below) again.
                self._too_old_at = max(resume, self._too_old_at or 0)
                if self._reader_cursor is not None and self._reader_cursor <= self._too_old_at:
                    self._reader_cursor = None
            return
        if isinstance(error, LimitExceededError) or response.status_code >= 500:
            log.info("SSE %s refused (%s): retrying later", self.url, error)
            return
        raise _PermanentError(error)

    def _read(self, source: EventSource) -> None:
        for event in source.iter_sse():
            if self._stop.is_set():
                return
            if event.event == "message" and event.data:
                # (httpx-sse turns a heartbeat comment after an event with an id into an empty
                # "message"; the SSE spec dispatches nothing for an empty data buffer.)
                self._message(event.data)
            elif event.event == "lagged":
                self.stats.lagged += 1
                log.warning("SSE %s: fell behind (%s); resuming after %s", self.url, event.data, self.last_event_id)
                return
            # anything else (a "ping" event, a future event type) only proves the connection is alive

    def _message(self, data: str) -> None:
        try:
            body = json.loads(data)
            msg = StreamMessage.from_json_dict(body["message"])
            if body.get("sequence") != msg.sequence:
                raise MalformedRecordError(f"event sequence {body.get('sequence')} ≠ message {msg.sequence}")
        except (ValueError, KeyError, TypeError, WatchtowerError) as err:
            self.stats.undecodable += 1
            log.warning("SSE %s: skipped an event that is not a message (%s)", self.url, err)
            return
        self.stats.received += 1
        while not self._stop.is_set():
            try:
                self._queue.put(msg, timeout=0.2)
                break
            except queue.Full:
                continue  # back-pressure: the server's own queue bounds what it holds for us
        if self.last_event_id is None or msg.sequence > self.last_event_id:
            self.last_event_id = msg.sequence


class _PermanentError(Exception):
    def __init__(self, error: WatchtowerError) -> None:
        super().__init__(str(error))
        self.error = error


def _error_of(response: httpx.Response) -> WatchtowerError:
    """The API's JSON error of `response`, else one naming its HTTP status."""
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            return WatchtowerError.from_dict(body["error"])
    except (ValueError, WatchtowerError):
        pass
    text = response.text[:200].strip()
    return WatchtowerError(f"{response.request.url} answered HTTP {response.status_code} ({text or 'no body'}), "
                           "not an event stream; check the URL (an API or gateway that serves "
                           "/v1/feeds/{id}/events)", code=f"HTTP_{response.status_code}")


def _shutdown_socket(response: httpx.Response) -> None:
    """Shut down the connection's socket (httpx's ``network_stream`` extension), if it has one."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed by the reader or the server
        sock.shutdown(socket.SHUT_RDWR)
