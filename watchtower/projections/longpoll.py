"""Long polls on a stream's head: waiters that cost nothing while they wait and never leak.

A ``GET .../messages?min_head=H&wait_ms=W`` parks on a future until the projection folds head H
or W ms pass (W is capped by `http_params.MAX_WAIT_MS`). Every way out of `HeadWaiters.wait`
(the head arrived, the time ran out, the client went away and aiohttp cancelled the handler,
or the worker is shutting down) removes the waiter, so the registry holds exactly the polls
that are still open. On shutdown `release_all` answers every open poll at once, so a SIGTERM
does not wait for the longest poll.

Wake-ups are coalesced: the fold reports every message it indexes (`wake`), and the polls are
answered once per turn of the event loop with the highest head reported in it (`_flush`), so a
fold that indexes a fetch's worth of records in one go answers each poll once, with all of them,
instead of once per record. The fold yields as soon as a poll is due an answer
(`answers_due`, `catch_up.CatchUp`), so a poll's answer never waits for the rest of a batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from watchtower.metrics.projection import OPEN_LONG_POLLS


class HeadWaiters:
    """Futures per stream, each waiting for the stream's head to reach a target."""

    def __init__(self) -> None:
        self._waiters: dict[str, dict[asyncio.Future[None], int]] = {}
        self._released = False
        self._pending: dict[str, int] = {}  # stream -> highest head reported since the last flush
        self._flush_scheduled = False
        self._keys: frozenset[bytes] | None = None  # `waited_keys`, until the waited streams change

    def __len__(self) -> int:
        """How many polls are waiting right now."""
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, stream_id: str, min_head: int, wait_ms: int, current_head: Callable[[], int]) -> None:
        """Return once `current_head()` reaches `min_head`, after `wait_ms`, or at shutdown.

        Cancellation (the client disconnected) propagates after the waiter is removed.
        """
        if self._released or current_head() >= min_head or wait_ms <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.get(stream_id)
        if waiters is None:
            waiters = self._waiters[stream_id] = {}
            self._keys = None
        waiters[future] = min_head
        OPEN_LONG_POLLS.inc()
        try:
            # Re-check after registering: the head may have moved between the first check and now.
            if current_head() >= min_head:
                return
            await asyncio.wait_for(future, wait_ms / 1000)
        except TimeoutError:
            pass
        finally:
            if not future.done():
                future.cancel()
            waiters.pop(future, None)
            OPEN_LONG_POLLS.dec()
            if not waiters and self._waiters.get(stream_id) is waiters:
                del self._waiters[stream_id]
                self._keys = None

    def waited_keys(self) -> frozenset[bytes]:
        """The record keys (UTF-8 stream ids) of the streams a poll waits on right now (the fold folds
        their publishes first). Kept until a stream starts or stops being waited on, so a fold that
        asks at every slice does not rebuild it from thousands of open polls."""
        if self._keys is None:
            # surrogatepass: a stream id no record could carry must not make the fold raise
            self._keys = frozenset(s.encode("utf-8", "surrogatepass") for s in self._waiters)
        return self._keys

    def wake(self, stream_id: str, head: int) -> None:
        """Answer, at the next turn of the event loop, the polls on `stream_id` whose target `head` reached.

        Outside a running event loop (offline folds) the polls are answered at once.
        """
        if stream_id not in self._waiters:
            return  # nobody waits on this stream: the common case costs one lookup
        if head > self._pending.get(stream_id, -1):
            self._pending[stream_id] = head
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._flush_scheduled = True
        loop.call_soon(self._flush)

    @property
    def answers_due(self) -> bool:
        """Whether a poll's head has been reported and not yet answered (a flush is scheduled)."""
        return self._flush_scheduled

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, {}
        for stream_id, head in pending.items():
            for future, target in list(self._waiters.get(stream_id, {}).items()):
                if target <= head and not future.done():
                    future.set_result(None)

    def release_all(self) -> None:
        """Answer every open poll now and every later one at once (the worker is stopping)."""
        self._released = True
        for waiters in list(self._waiters.values()):
            for future in list(waiters):
                if not future.done():
                    future.set_result(None)
