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


def test_wake_ups_in_one_turn_of_the_loop_answer_each_poll_once_with_the_highest_head() -> None:
    async def run() -> None:
        waiters, head = HeadWaiters(), [0]
        answered: list[int] = []

        async def poll(target: int) -> None:
            await waiters.wait("s", target, 30_000, lambda: head[0])
            answered.append(head[0])

        low, high = asyncio.create_task(poll(2)), asyncio.create_task(poll(4))
        other = asyncio.create_task(waiters.wait("t", 1, 30_000, lambda: 0))
        await asyncio.sleep(0)
        for sequence in range(1, 6):  # a fetch's worth of records folded without yielding
            head[0] = sequence
            waiters.wake("s", sequence)
        assert answered == []  # nothing is answered inside the fold's turn
        assert waiters._flush_scheduled  # one flush for all five wake-ups
        await asyncio.wait_for(asyncio.gather(low, high), 10)
        assert answered == [5, 5]  # each poll answered once, seeing every record folded in that turn
        assert not other.done()  # a poll on another stream is not woken
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
        assert len(waiters) == 0

    asyncio.run(run())


def test_outside_an_event_loop_a_wake_up_answers_at_once() -> None:
    waiters = HeadWaiters()
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        waiters._waiters["s"] = {future: 3}
        waiters.wake("s", 3)  # an offline fold: no loop runs
        assert future.done()
    finally:
        loop.close()


def test_the_waited_keys_follow_the_open_polls() -> None:
    """The fold asks which streams are waited on at every slice: the answer changes exactly when a
    stream starts or stops being waited on, and a stream id no record could carry does not raise."""

    async def scenario() -> list[frozenset[bytes]]:
        waiters = HeadWaiters()
        seen = [waiters.waited_keys()]
        first = asyncio.ensure_future(waiters.wait("a", 1, 30_000, lambda: 0))
        second = asyncio.ensure_future(waiters.wait("a", 2, 30_000, lambda: 0))
        odd = asyncio.ensure_future(waiters.wait("\udcff", 1, 30_000, lambda: 0))
        await asyncio.sleep(0)
        seen.append(waiters.waited_keys())
        odd.cancel()
        first.cancel()
        await asyncio.gather(first, odd, return_exceptions=True)
        seen.append(waiters.waited_keys())  # "a" still has a poll open
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        seen.append(waiters.waited_keys())
        return seen

    assert asyncio.run(scenario()) == [frozenset(), frozenset({b"a", b"\xed\xb3\xbf"}), frozenset({b"a"}),
                                       frozenset()]
