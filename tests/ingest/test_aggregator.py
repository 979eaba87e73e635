"""The aggregator's decisions with an in-memory sink: order, recovery, retries and hostile results.
(The real sink, the stream actor behind it, is exercised by test_ingest_e2e.)"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import fastavro
import nacl.signing

from watchtower.ingest.aggregator import Aggregator
from watchtower.ingest.sink_contract import TransientError
from watchtower.ingest.view import IngestingStream, IngestionView
from watchtower.ingest.window import SendWindow
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion import IngestReason
from watchtower.protocol.ingestion.records import TASK_BATCH_DOMAIN, IngestTask, new_result, new_task, sign_batch
from watchtower.protocol.ingestion.runners import RUNNERS_KEY, RunnerRegistry, decide_runner, evolve_runners
from watchtower.protocol.ingestion.transform import Payload
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.schemas import codec
from watchtower.schemas.ingest_records import encode_result, encode_result_batch, encode_task, encode_task_batch
from watchtower.schemas.wire import encode_event

OWNER = nacl.signing.SigningKey(b"\x01" * 32)
DELEGATE = nacl.signing.SigningKey(b"\x02" * 32)
SCHEDULER = nacl.signing.SigningKey(b"\x03" * 32)
RUNNERS = [nacl.signing.SigningKey(bytes([0x30 + i]) * 32) for i in range(3)]
SID = "agg-stream"
HEIGHT = 1_000_000
CONFIG = {"enabled": True, "interval_blocks": 1, "num_runners": 3, "proof_type": "QUORUM",
          "transform_method": None, "result_schema": {"type": "object", "required": ["p"]},
          "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:1/p", "timeout_blocks": 2}}


class Sink:
    def __init__(self, last: int = 0) -> None:
        self.published: list[tuple[int, bytes]] = []
        self.reports: list[tuple[int, int, str]] = []
        self.last = last
        self.fail_next = 0

    def last_ingested_tick(self, stream: IngestingStream) -> int:  # noqa: ARG002
        return self.last

    def publish(self, stream: IngestingStream, tick: int, timestamp_ms: int,  # noqa: ARG002
                payloads: tuple[Payload, ...]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise TransientError("the API is down")
        self.published += [(tick, p.payload) for p in payloads]

    def report(self, stream: IngestingStream, first: int, last: int, reason: IngestReason,  # noqa: ARG002
               detail: str, timestamp_ms: int) -> None:  # noqa: ARG002
        self.reports.append((first, last, str(reason)))


def aggregator(sink: Any, streams: Sequence[str] = (SID,), window: SendWindow | None = None) -> Aggregator:
    """An aggregator over `streams` (each an ingesting feed with `CONFIG`) and the 3 registered
    `RUNNERS`, publishing to `sink`."""
    view = IngestionView()
    for sid in streams:
        create = sign_command(OWNER, "create_stream", sid, 1, {"publisher_key": bytes(DELEGATE.verify_key),
                                                              "ingestion": CONFIG})
        view.fold(encode_event(decide(StreamState.initial(sid), create, block_height=HEIGHT).events[0]))
    reg = RunnerRegistry()
    for i, key in enumerate(RUNNERS):
        event, _ = decide_runner(reg, sign_command(key, "register_runner", RUNNERS_KEY, 5, {"label": f"r{i}"}),
                                 block_height=HEIGHT)
        assert event is not None
        reg = evolve_runners(reg, event)
        view.fold(encode_event(event))
    assert len(view.registered()) == 3
    assert set(streams) <= set(view.streams)
    return Aggregator(view, address_from_public_key(bytes(SCHEDULER.verify_key)), sink, window=window)


def task(tick: int, skip_from: int | None = None) -> IngestTask:
    keys = tuple(bytes(k.verify_key) for k in RUNNERS)
    return new_task(stream_id=SID, tick=tick, tick_height=HEIGHT + tick, timeout_blocks=2, config=CONFIG,
                    runner_keys=() if skip_from else keys, scheduler=SCHEDULER, skip_from=skip_from)


def result(t: IngestTask, runner: int, value: Any) -> bytes:
    body = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return encode_result(new_result(t, RUNNERS[runner], result=body))


def test_quorum_outvotes_the_liar_and_ticks_finish_in_order() -> None:
    sink = Sink()
    agg = aggregator(sink)
    t1, t2 = task(1), task(2)
    agg.on_task(encode_task(t1))
    agg.on_task(encode_task(t2))
    for runner, price in ((0, 5), (1, 5), (2, 6)):
        agg.on_result(result(t2, runner, {"p": price}))
    agg.on_result(result(t1, 2, {"p": 9}))
    agg.step(HEIGHT + 2)
    assert sink.published == [], "tick 2 is decided, but tick 1 is still open"
    agg.on_result(result(t1, 0, {"p": 4}))
    agg.on_result(result(t1, 1, {"p": 4}))
    agg.step(HEIGHT + 2)
    assert sink.published == [(1, b'{"p":4}'), (2, b'{"p":5}')]
    agg.on_result(result(t1, 0, {"p": 4}))  # replayed
    assert agg.quarantined["STALE_SEQUENCE"] == 1


def test_deadline_skip_notice_early_results_and_transient_retry() -> None:
    sink = Sink()
    agg = aggregator(sink)
    t3, t4 = task(3), task(4)
    agg.on_result(result(t3, 0, {"p": 1}))  # before its task: kept until the task arrives
    agg.on_task(encode_task(task(2, skip_from=1)))
    agg.on_task(encode_task(t3))
    agg.on_task(encode_task(t4))
    agg.step(HEIGHT + 3)
    assert sink.reports == [(1, 2, "TICKS_SKIPPED")]
    agg.step(HEIGHT + 6)  # past tick 3's deadline with one valid result of three
    assert sink.reports[-1] == (3, 3, "TOO_FEW_RESULTS")
    sink.fail_next = 1
    for runner in range(3):
        agg.on_result(result(t4, runner, {"p": 2}))
    agg.step(HEIGHT + 6)
    assert sink.published == [], "the API was down: the tick waits"
    agg.step(HEIGHT + 7)
    assert sink.published == [(4, b'{"p":2}')]


def test_a_restarted_aggregator_skips_what_the_log_shows_finished() -> None:
    sink = Sink(last=5)
    agg = aggregator(sink)
    agg.view.last_failed_tick[SID] = 7
    for tick in (6, 7, 8):
        agg.on_task(encode_task(task(tick)))
        for runner in range(3):
            agg.on_result(result(task(tick), runner, {"p": tick}))
    agg.step(HEIGHT + 9)
    assert sink.published == [(8, b'{"p":8}')], "ticks 6 and 7 were finished before the restart"
    assert sink.reports == []


def test_hostile_results_are_counted_and_ignored() -> None:
    sink = Sink()
    agg = aggregator(sink)
    t1 = task(1)
    agg.on_task(encode_task(t1))
    stranger = nacl.signing.SigningKey(b"\x09" * 32)
    agg.on_result(encode_result(new_result(t1, stranger, result=b'{"p":1}')))
    forged = new_result(t1, RUNNERS[0], result=b'{"p":1}')
    agg.on_result(encode_result(dataclasses.replace(forged, result_json='{"p":2}')))  # altered after signing
    agg.on_result(result(t1, 1, {"q": 1}))  # breaks result_schema
    agg.on_result(b"garbage")
    agg.on_task(encode_task(new_task(stream_id=SID, tick=9, tick_height=HEIGHT, timeout_blocks=1, config=CONFIG,
                                     runner_keys=(), scheduler=stranger)))
    assert agg.quarantined["UNAUTHORIZED"] == 2  # the unregistered runner and the stranger's task
    assert agg.quarantined["INVALID_SIGNATURE"] == 1
    assert agg.quarantined["SCHEMA_MISMATCH"] == 1
    assert agg.quarantined["MALFORMED_RECORD"] == 1
    agg.step(HEIGHT + 5)
    assert sink.published == []
    assert sink.reports == [(1, 1, "SCHEMA_MISMATCH")]


def test_a_lagging_reader_does_not_time_out_an_answer_written_in_time() -> None:
    """Past the deadline by the clock, but the results read so far end before the deadline did:
    the tick waits for the rest of the results instead of timing out, and the answer counts."""
    from watchtower.ingest.runner import block_ms

    sink = Sink()
    agg = aggregator(sink)
    t1 = task(1)
    agg.on_task(encode_task(t1))
    deadline_end = block_ms(t1.deadline_height + 1)
    read_to = {"ms": deadline_end - 1}
    agg.step(HEIGHT + 9, lambda _sid: read_to["ms"])
    assert sink.reports == [], "results written before the deadline may still be unread"
    for runner in range(3):
        agg.on_result(result(t1, runner, {"p": 3}))
    read_to["ms"] = deadline_end + 5_000
    agg.step(HEIGHT + 9, lambda _sid: read_to["ms"])
    assert sink.published == [(1, b'{"p":3}')]
    t2 = task(2)
    agg.on_task(encode_task(t2))
    agg.step(HEIGHT + 9, lambda _sid: read_to["ms"])
    assert sink.reports == [(2, 2, "TIMEOUT")], "read past its deadline with no answer: TIMEOUT"


class Silent(Sink):
    """A sink whose publishes wait for an answer the test gives (`sent`)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Future[None]] = []
        self.forgotten = 0

    def submit_publish(self, *_: Any) -> Future[None]:
        self.sent.append(Future())
        return self.sent[-1]

    def forget_head(self, stream_id: str) -> None:  # noqa: ARG002
        self.forgotten += 1


def sent_once(sink: Silent) -> Aggregator:
    """An aggregator that has sent tick 1's publish to `sink`, unanswered."""
    agg = aggregator(sink)
    t1 = task(1)
    agg.on_task(encode_task(t1))
    for runner in range(3):
        agg.on_result(result(t1, runner, {"p": 1}))
    agg.step(HEIGHT + 1)
    assert len(sink.sent) == 1
    return agg


def test_a_publish_without_an_answer_is_given_up_and_its_tick_tried_again() -> None:
    """No reply in time (no stream worker): the aggregator stops waiting, forgets the head (the
    publish may still land) and sends the tick again; the tick is never counted as published
    until an answer says so."""
    sink = Silent()
    agg = sent_once(sink)
    agg.reply_timeout_s = 0.0
    agg.step(HEIGHT + 2)  # the answer is overdue: given up, the transport's future cancelled
    assert sink.sent[0].cancelled()
    assert sink.forgotten == 1
    assert agg.published == 0
    agg.reply_timeout_s = 30.0
    agg.step(HEIGHT + 2)
    assert len(sink.sent) == 2, "the tick is sent again"
    sink.sent[1].set_result(None)
    agg.step(HEIGHT + 3)
    assert agg.published == 1
    assert agg.done[SID] == 1


# --- batches ---------------------------------------------------------------------------------------

def unsigned(t: IngestTask) -> IngestTask:
    return dataclasses.replace(t, signature=b"")


def result_batch(runner: int, answers: list[tuple[IngestTask, Any]],
                 key: nacl.signing.SigningKey | None = None) -> bytes:
    entries = [new_result(t, RUNNERS[runner], result=json.dumps(v, separators=(",", ":")).encode(), for_batch=True)
               for t, v in answers]
    return encode_result_batch(entries, key or RUNNERS[runner])


def signed_entries_batch(tasks: list[IngestTask], key: nacl.signing.SigningKey) -> bytes:
    """A task batch whose entries keep their own signatures (our encoder never writes one)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema({"type": "array", "items": codec.avro_schema("IngestTask")}),
                               [{**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)},
                                 "runners": list(t.runners)} for t in tasks])
    batch = sign_batch(TASK_BATCH_DOMAIN, out.getvalue(), key)
    return codec.encode("IngestTaskBatch", {"scheduler": batch.signer, "tasks": batch.body,
                                            "signature": batch.signature})


def test_a_block_in_batches_decides_as_single_records_do() -> None:
    sink = Sink()
    agg = aggregator(sink)
    t1, t2 = task(1), task(2)
    assert agg.on_tasks(encode_task_batch([unsigned(t1), unsigned(t2)], SCHEDULER)) == [SID, SID]
    agg.on_results(result_batch(0, [(t1, {"p": 4}), (t2, {"p": 5})]))
    agg.on_results(result_batch(1, [(t1, {"p": 4}), (t2, {"p": 5})]))
    agg.on_results(result_batch(2, [(t1, {"p": 9}), (t2, {"p": 6})]))  # the liar, outvoted
    agg.step(HEIGHT + 2)
    assert sink.published == [(1, b'{"p":4}'), (2, b'{"p":5}')]
    agg.on_results(result_batch(0, [(t1, {"p": 4})]))  # a replayed batch: its tick is finished
    assert agg.quarantined["STALE_SEQUENCE"] == 1
    assert not agg.quarantined.keys() - {"STALE_SEQUENCE"}


def test_forged_batches_are_quarantined_whole_or_entry_by_entry() -> None:
    sink = Sink()
    agg = aggregator(sink)
    stranger = nacl.signing.SigningKey(b"\x09" * 32)
    t1 = task(1)
    # A task batch signed by anyone but the deployment's scheduler: nothing in it is taken.
    assert agg.on_tasks(encode_task_batch([unsigned(t1)], stranger)) == []
    assert agg.quarantined["UNAUTHORIZED"] == 1
    # A task batch whose bytes were changed after signing.
    tampered = bytearray(encode_task_batch([unsigned(t1)], SCHEDULER))
    tampered[-80] ^= 1
    assert agg.on_tasks(bytes(tampered)) == []
    assert agg.quarantined["INVALID_SIGNATURE"] == 1
    # A task in a batch that carries a signature of its own (a single task repackaged).
    assert agg.on_tasks(signed_entries_batch([t1], SCHEDULER)) == []
    assert agg.quarantined["MALFORMED_RECORD"] == 1
    assert agg.on_tasks(encode_task_batch([unsigned(t1)], SCHEDULER)) == [SID]
    # A stranger's result batch; a registered runner's batch re-signed by another registered runner
    # (it speaks for runner 0, signed by runner 1); a batch naming a runner not selected.
    agg.on_results(result_batch(0, [(t1, {"p": 4})], key=stranger))
    assert agg.quarantined["UNAUTHORIZED"] == 2
    agg.on_results(result_batch(0, [(t1, {"p": 4})], key=RUNNERS[1]))
    assert agg.quarantined["MALFORMED_RECORD"] == 2
    agg.on_results(b"\x57\x00\x06\x00\x01" + b"\x00" * 8)  # a batch header over bytes that are no batch
    assert agg.quarantined["MALFORMED_RECORD"] == 3
    agg.step(HEIGHT + 2)
    assert sink.published == [], "no forged result counted toward the quorum"
    for runner in (0, 1):
        agg.on_results(result_batch(runner, [(t1, {"p": 4})]))
    agg.step(HEIGHT + 2)
    assert sink.published == [(1, b'{"p":4}')]


def test_an_answer_is_landed_in_the_next_step_not_at_the_next_block() -> None:
    sink = Silent()
    agg = sent_once(sink)
    agg.step(HEIGHT + 1)
    assert agg.published == 0, "no answer yet"
    sink.sent[0].set_result(None)  # the worker's answer, on the reply reader's thread
    agg.step(HEIGHT + 1)  # the same block: the answer alone brings the stream back
    assert agg.published == 1
    assert agg.done[SID] == 1
