"""The aggregator's send window: a block's burst of publishes is let through as fast as the stream
worker answers, without queueing at the worker, and no held tick is lost or reordered."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from tests.ingest.test_aggregator import CONFIG, HEIGHT, RUNNERS, SCHEDULER, aggregator, result
from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.view import IngestingStream
from watchtower.ingest.window import SendWindow
from watchtower.protocol.ingestion.records import IngestTask, new_task
from watchtower.schemas.ingest_records import encode_task


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_grows_while_answers_come_back_as_fast_as_the_least_round_trip() -> None:
    window = SendWindow(initial=16, min_limit=16, low=4, high=8, clock=Clock())
    for _ in range(100):
        window.sent()
        window.answered(0.020)  # every answer as fast as the best: nothing queues at the worker
    assert window.limit == 116
    assert window.base_s() == pytest.approx(0.020)


def test_the_limit_shrinks_when_a_queue_forms_and_never_below_its_floor() -> None:
    window = SendWindow(initial=64, min_limit=16, low=4, high=8, clock=Clock())
    window.sent()
    window.answered(0.020)  # the least round trip
    for _ in range(30):
        window.sent()
        window.answered(0.080)  # 64 × (1 − 20/80) = 48 queued, above 8
    assert window.limit == 64 + 1 - 30
    for _ in range(100):
        window.sent()
        window.answered(0.080)
    assert window.limit == 16


def test_a_sender_that_falls_behind_grows_the_limit_whatever_the_queue_estimate() -> None:
    """Keeping up comes first: a busy machine's slow round trips must not cap ingestion below the
    rate its feeds tick at."""
    window = SendWindow(initial=64, min_limit=16, low=4, high=8, clock=Clock())
    window.sent()
    window.answered(0.010)
    for _ in range(50):
        window.sent()
        window.answered(0.100, behind=True)
    assert window.limit == 65 + 50
    window.sent()
    window.answered(0.100)  # caught up: the estimate rules again
    assert window.limit == 65 + 50 - 1


def test_the_base_round_trip_is_forgotten_after_its_period() -> None:
    """A worker that became slower (a busier machine) is not held to one lucky answer forever."""
    clock = Clock()
    window = SendWindow(base_period_s=10.0, clock=clock)
    window.sent()
    window.answered(0.010)
    clock.now = 30.0
    window.sent()
    window.answered(0.050)
    assert window.base_s() == pytest.approx(0.050)


def test_room_counts_what_is_in_flight() -> None:
    window = SendWindow(initial=16, min_limit=16)
    for _ in range(16):
        window.sent()
    assert window.room() == 0
    window.forget()
    assert window.room() == 1
    with pytest.raises(ValueError, match="low <= high"):
        SendWindow(low=10, high=5)


# --- the window in the aggregator ----------------------------------------------------------------

STREAMS = [f"window-{i:02d}" for i in range(40)]


class Answering:
    """A sink whose publishes wait for answers the test gives, in the order they were sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, Future[None]]] = []

    def last_ingested_tick(self, stream: IngestingStream) -> int:  # noqa: ARG002
        return 0

    def submit_publish(self, stream: IngestingStream, tick: int, *_: Any) -> Future[None]:
        future: Future[None] = Future()
        self.sent.append((stream.stream_id, tick, future))
        return future

    def forget_head(self, stream_id: str) -> None:
        pass

    def unanswered(self) -> list[tuple[str, int, Future[None]]]:
        return [s for s in self.sent if not s[2].done()]


def many_streams(sink: Answering, window: SendWindow) -> Aggregator:
    return aggregator(sink, STREAMS, window)


def task_of(sid: str, tick: int) -> IngestTask:
    keys = tuple(bytes(k.verify_key) for k in RUNNERS)
    return new_task(stream_id=sid, tick=tick, tick_height=HEIGHT + tick, timeout_blocks=2, config=CONFIG,
                    runner_keys=keys, scheduler=SCHEDULER)


def answered_block(agg: Aggregator, tick: int) -> None:
    for sid in STREAMS:
        t = task_of(sid, tick)
        agg.on_task(encode_task(t))
        for runner in range(3):
            agg.on_result(result(t, runner, {"p": tick}))


def test_a_burst_waits_in_the_aggregator_and_every_tick_is_published_once_in_order() -> None:
    sink = Answering()
    agg = many_streams(sink, SendWindow(initial=16, min_limit=16, max_limit=16))
    answered_block(agg, 1)
    answered_block(agg, 2)
    agg.step(HEIGHT + 2)
    assert len(sink.unanswered()) == 16, "no more in flight than the window allows"
    assert agg.health()["window"]["held"] == len(STREAMS) - 16  # type: ignore[index]
    first_sent = [sid for sid, _tick, _f in sink.sent]
    for _ in range(50):
        for _sid, _tick, future in sink.unanswered():
            future.set_result(None)
        agg.step(HEIGHT + 2)
        assert len(sink.unanswered()) <= 16
    assert agg.published == 2 * len(STREAMS)
    sent = [(sid, tick) for sid, tick, _f in sink.sent]
    assert sorted(sent) == sorted((sid, tick) for sid in STREAMS for tick in (1, 2)), "each tick sent once"
    for sid in STREAMS:
        assert [tick for s, tick in sent if s == sid] == [1, 2], "a stream's ticks in order"
    # Once answers free room, the streams that found the window full go before the streams whose
    # next tick only became ready since: a held tick does not wait behind newer ones.
    held = {sid for sid in STREAMS if sid not in first_sent[:16]}
    assert sent[16:32] == [(sid, 1) for sid, _tick in sent[16:32]]
    assert {sid for sid, _tick in sent[16:32]} <= held
