"""Long polls on a stream's head: waiters that cost nothing while they wait and never leak.

A ``GET .../messages?min_head=H&wait_ms=W`` parks on a future until the projection folds head H
or W ms pass (W is capped by `http_params.MAX_WAIT_MS`). Every way out of `HeadWaiters.wait`
(the head arrived, the time ran out, the client went away and aiohttp cancelled the handler,
or the worker is shutting down) removes the waiter, so the registry holds exactly the polls
that are still open. On shutdown `release_all` answers every open poll at once, so a SIGTERM
does not wait for the longest poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class HeadWaiters:
    """Futures per stream, each waiting for the stream's head to reach a target."""

    def __init__(self) -> None:
        self._waiters: dict[str, dict[asyncio.Future[None], int]] = {}
        self._released = False

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
        waiters = self._waiters.setdefault(stream_id, {})
        waiters[future] = min_head
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
            if not waiters and self._waiters.get(stream_id) is waiters:
                del self._waiters[stream_id]

    def wake(self, stream_id: str, head: int) -> None:
        """Answer the polls on `stream_id` whose target `head` reached."""
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
