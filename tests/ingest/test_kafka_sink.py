"""The aggregator's Kafka sink against the real stream actor (decide/evolve in memory, no broker):
heads from replies and from the events fold, and exactly one outcome per tick when a predecessor's
publish lands behind the aggregator's back. (On a real broker: test_ingest_e2e, test_ingest_scale.)"""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

import nacl.signing
from hypothesis import given
from hypothesis import strategies as st

from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.runner import now_height
from watchtower.ingest.sink import KafkaSink
from watchtower.ingest.view import IngestionView
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import tick_height, tick_stamped
from watchtower.protocol.ingestion.records import IngestTask, new_result, new_task
from watchtower.protocol.ingestion.runners import RUNNERS_KEY, RunnerRegistry, decide_runner
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import StreamState, decide, evolve
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.ingest_records import encode_result, encode_task
from watchtower.schemas.wire import encode_event

OWNER = nacl.signing.SigningKey(b"\x11" * 32)
DELEGATE = nacl.signing.SigningKey(b"\x12" * 32)
SCHEDULER = nacl.signing.SigningKey(b"\x13" * 32)
RUNNER = nacl.signing.SigningKey(b"\x14" * 32)
SID = "sink-stream"
ANCHOR = now_height() - 100  # the actor refuses nonces more than a day ahead of its block clock
CONFIG = {"enabled": True, "interval_blocks": 1, "num_runners": 1, "proof_type": "NONE",
          "transform_method": None, "result_schema": {"type": "object"},
          "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:1/p", "timeout_blocks": 2}}


class Actor:
    """The stream actor as the sink's command transport: each command decided at once, its events
    kept in `log` (what a worker writes to ``events``); `fold_to` hands them to a view."""

    def __init__(self) -> None:
        self.state = StreamState.initial(SID)
        self.log: list[bytes] = []
        self.sent: list[Command] = []

    def submit(self, cmd: Command, *, key: str | None = None, poll: bool = True) -> Future[dict[str, Any]]:  # noqa: ARG002
        self.sent.append(cmd)
        future: Future[dict[str, Any]] = Future()
        try:
            decision = decide(self.state, cmd, block_height=now_height())
        except WatchtowerError as exc:
            future.set_exception(exc)
            return future
        for event in decision.events:
            self.state = evolve(self.state, event)
            self.log.append(encode_event(event))
        future.set_result(dict(decision.reply or {}))
        return future

    def fold_to(self, view: IngestionView, folded: int) -> int:
        for record in self.log[folded:]:
            view.fold(record)
        return len(self.log)


def world() -> tuple[Actor, IngestionView, int]:
    actor, view = Actor(), IngestionView()
    create = sign_command(OWNER, "create_stream", SID, 1, {"publisher_key": bytes(DELEGATE.verify_key),
                                                          "ingestion": CONFIG})
    decision = decide(actor.state, create, block_height=ANCHOR)
    actor.state = evolve(actor.state, decision.events[0])
    actor.log.append(encode_event(decision.events[0]))
    event, _ = decide_runner(RunnerRegistry(), sign_command(RUNNER, "register_runner", RUNNERS_KEY, 5, {"label": "r"}),
                             block_height=ANCHOR)
    assert event is not None
    actor.log.append(encode_event(event))
    return actor, view, actor.fold_to(view, 0)


def task(tick: int) -> IngestTask:
    return new_task(stream_id=SID, tick=tick, tick_height=tick_height(ANCHOR, 1, tick), timeout_blocks=2,
                    config=CONFIG, runner_keys=(bytes(RUNNER.verify_key),), scheduler=SCHEDULER)


def feed(agg: Aggregator, tick: int, value: int) -> None:
    t = task(tick)
    agg.on_task(encode_task(t))
    agg.on_result(encode_result(new_result(t, RUNNER, result=json.dumps({"p": value}, separators=(",", ":")).encode())))


def aggregator(actor: Actor, view: IngestionView) -> Aggregator:
    return Aggregator(view, address_from_public_key(bytes(SCHEDULER.verify_key)), KafkaSink(actor, view, DELEGATE))


def test_ticks_publish_in_order_and_the_fold_knows_which_tick_each_message_finished() -> None:
    actor, view, folded = world()
    agg = aggregator(actor, view)
    for tick in (1, 2, 3):
        feed(agg, tick, 100 + tick)
    agg.step(ANCHOR + 3)
    assert actor.state.head == 3
    assert [c.body["sequence"] for c in actor.sent] == [1, 2, 3], "one command per tick, head + 1 each"
    actor.fold_to(view, folded)
    assert view.head(SID) == (3, 1, bytes(DELEGATE.verify_key))
    assert view.last_published_tick[SID] == 3
    assert view.last_finished_tick(SID) == 3


def test_a_predecessors_publish_that_lands_late_is_not_published_again() -> None:
    """Tick 1 was published by an aggregator that died before its fold saw it; its successor's fold
    lags, so it decides tick 1 again (from another runner's answer): STALE_SEQUENCE, then it waits
    for the fold, learns tick 1 is finished, and publishes tick 2 alone."""
    actor, view, folded = world()
    first = aggregator(actor, view)
    feed(first, 1, 7)
    first.step(ANCHOR + 1)
    assert actor.state.head == 1
    successor_view = IngestionView()
    successor_folded = len(actor.log) - 1  # everything but the predecessor's publish
    for record in actor.log[:successor_folded]:
        successor_view.fold(record)
    successor = aggregator(actor, successor_view)
    feed(successor, 1, 8)  # a different answer for the same tick: not a byte-identical retry
    feed(successor, 2, 9)
    successor.step(ANCHOR + 2)
    assert actor.state.head == 1, "the stale publish was refused, and tick 2 waits behind tick 1"
    assert successor.resync == {SID: 1}
    successor.step(ANCHOR + 2)
    assert actor.state.head == 1, "still waiting: the fold has not read sequence 1"
    actor.fold_to(successor_view, successor_folded)
    successor.step(ANCHOR + 2)
    assert actor.state.head == 2
    published = [json.loads(StreamMessage.from_json_dict(c.body).payload_inline)
                 for c in actor.sent if c.method == "publish"]
    assert [c.body["sequence"] for c in actor.sent] == [1, 1, 2]
    assert published[-1] == {"p": 9}
    actor.fold_to(view, folded)
    assert view.last_published_tick[SID] == 2, "each tick ended in exactly one message"
    assert not any(c.method == "report_ingest_failure" for c in actor.sent)


def test_a_stream_delegated_to_another_key_is_refused_before_anything_is_sent() -> None:
    actor, view, _ = world()
    other = KafkaSink(actor, view, nacl.signing.SigningKey(b"\x15" * 32))
    agg = Aggregator(view, address_from_public_key(bytes(SCHEDULER.verify_key)), other)
    feed(agg, 1, 1)
    agg.step(ANCHOR + 1)
    assert [c.method for c in actor.sent] == ["report_ingest_failure"], "no publish left the process"
    assert agg.quarantined["REPORT_REFUSED"] == 1, "the stranger key cannot report for the stream either"


@given(anchor=st.integers(0, 10**9), interval=st.integers(1, 1000), tick=st.integers(1, 10**6),
       skew=st.integers(1, BLOCK_INTERVAL_MS - 1))
def test_a_tick_is_read_back_from_its_stamp_and_nothing_else_is(anchor: int, interval: int, tick: int,
                                                               skew: int) -> None:
    stamp = GENESIS_UNIX_MS + tick_height(anchor, interval, tick) * BLOCK_INTERVAL_MS
    assert tick_stamped(anchor, interval, stamp) == tick
    assert tick_stamped(anchor, interval, stamp + skew) is None
    assert tick_stamped(anchor, interval, GENESIS_UNIX_MS + anchor * BLOCK_INTERVAL_MS) is None
    if interval > 1:
        assert tick_stamped(anchor, interval, stamp + BLOCK_INTERVAL_MS) is None


def test_the_fold_skips_other_streams_records_by_their_header_and_key() -> None:
    """Most of ``events`` is other streams' publishes: the aggregator's fold reads their header and
    key only, and the scheduler's fold (no heads) reads only creations and runner events."""
    actor, view, _ = world()
    published = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=GENESIS_UNIX_MS, kind="x", payload=b"{}",
                             signing_key=DELEGATE)
    header = encode_event(decide(actor.state, Command("publish", SID, OWNER.verify_key.encode(), 1,
                                                      published.to_json_dict(), published.publisher_sig),
                                 block_height=now_height()).events[0])[:5]
    garbage = header + b"\xff" * 8  # a StreamMessagePublished header over a body that does not decode
    view.fold(garbage, b"someone-else")
    assert view.refused.total() == 0, "another stream's publish is skipped undecoded"
    view.fold(garbage, SID.encode())
    assert view.refused.total() == 1, "an ingesting stream's record is decoded (and this one refused)"
    scheduler_view = IngestionView(heads=False)
    for record in actor.log:
        scheduler_view.fold(record)
    scheduler_view.fold(garbage, SID.encode())
    assert scheduler_view.refused.total() == 0
    assert SID in scheduler_view.streams
    assert SID not in scheduler_view.states, "the scheduler keeps no stream state"
