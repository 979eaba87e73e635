"""The wire form of the SSE route's events, made once and shared (docs/sse.md, "What a live record costs").

aiohttp-sse owns the response (its headers, pings, send timeout); `encode_event` makes the same
bytes its ``send`` writes, so an event can be formatted once for every connection of a feed, and
`EventStream.send_encoded` writes many such events in one write, with `send`'s contract for a
stalled or vanished client.
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp_sse import EventSourceResponse

#: The line separator of every event; the response is made with the same (`sse_response(sep=...)`).
SEP: Final = "\n"


def encode_event(data: str, *, id: str | None = None, event: str | None = None) -> bytes:
    """The bytes aiohttp-sse's ``EventSourceResponse.send(data, id=id, event=event)`` writes with
    ``sep=SEP`` (a test holds the two equal), made once so that every connection of a feed shares
    them and one write carries many events. `id` and `event` must hold no line separator (ours
    are sequences and fixed names)."""
    parts = [] if id is None else [f"id: {id}"]
    if event is not None:
        parts.append(f"event: {event}")
    # Only data may hold line breaks (JSON text never does): each line is its own `data:` field.
    lines = EventSourceResponse.LINE_SEP_EXPR.split(data) if ("\n" in data or "\r" in data) else (data,)
    parts += [f"data: {line}" for line in lines]
    return (SEP.join(parts) + SEP + SEP).encode("utf-8")


class EventStream(EventSourceResponse):
    """aiohttp-sse's response (headers, pings, `send`), plus `send_encoded` for pre-formatted events."""

    async def send_encoded(self, payload: bytes) -> None:
        """Write events already in the wire format (`encode_event`, concatenated) in one write.

        The same contract as `send`: a write that outlasts the send timeout (a stalled client)
        aborts the connection and raises TimeoutError; a reset connection stops the stream.
        """
        try:
            async with asyncio.timeout(self._send_timeout):
                await self.write(payload)
        except ConnectionResetError:
            self.stop_streaming()
            raise
        except TimeoutError:
            self.stop_streaming()
            self._abort_transport()
            raise
