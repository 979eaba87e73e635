"""Long-poll waiters: answered by the head, by the clock, or at shutdown; removed however they end."""

from __future__ import annotations

import asyncio

from watchtower.projections.longpoll import HeadWaiters


def test_abandoned_polls_leave_no_waiter_behind() -> None:
    async def run() -> None:
        waiters = HeadWaiters()
        polls = [asyncio.create_task(waiters.wait("s", 5, 30_000, lambda: 0)) for _ in range(500)]
        await asyncio.sleep(0)
        assert len(waiters) == 500
        for poll in polls:  # what aiohttp does when each client disconnects
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        assert len(waiters) == 0
        assert waiters._waiters == {}

    asyncio.run(run())


def test_a_poll_returns_when_the_head_arrives_or_its_time_runs_out() -> None:
    async def run() -> None:
        waiters, head = HeadWaiters(), [0]
        reached = asyncio.create_task(waiters.wait("s", 2, 30_000, lambda: head[0]))
        expires = asyncio.create_task(waiters.wait("t", 2, 10, lambda: 0))
        await asyncio.sleep(0)
        head[0] = 2
        waiters.wake("s", 2)
        await asyncio.wait_for(asyncio.gather(reached, expires), 10)
        assert len(waiters) == 0

    asyncio.run(run())


def test_shutdown_answers_every_open_poll_at_once() -> None:
    async def run() -> None:
        waiters = HeadWaiters()
        polls = [asyncio.create_task(waiters.wait(f"s{i}", 1, 30_000, lambda: 0)) for i in range(50)]
        await asyncio.sleep(0)
        waiters.release_all()
        await asyncio.wait_for(asyncio.gather(*polls), 10)
        assert len(waiters) == 0
        await asyncio.wait_for(waiters.wait("late", 1, 30_000, lambda: 0), 10)  # later polls answer at once

    asyncio.run(run())
