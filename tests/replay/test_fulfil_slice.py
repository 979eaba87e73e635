"""One slice of a replay, without Kafka: what is delivered, checkpointed, completed, errored, quarantined."""

from __future__ import annotations

import nacl.signing

from watchtower.protocol.replay.records import ReplayCompleted, ReplayErrored, ReplayProgress, ReplayRegistration
from watchtower.protocol.replay.rules import selector_for
from watchtower.protocol.replay.status import ReplayView, apply_replay_record
from watchtower.protocol.signing import sign_message
from watchtower.replay.fulfil import ArchivedRecord, cancel_record, fulfil_slice
from watchtower.replay.handoff import spark_threshold, wants_spark
from watchtower.schemas.records import encode_message

KEY = nacl.signing.SigningKey(b"\x01" * 32)
S = "s-0000000000000001"


def raw(seq: int, stream: str = S, kind: str = "k") -> bytes:
    return encode_message(sign_message(stream_id=stream, sequence=seq, timestamp_unix_ms=seq, kind=kind,
                                       payload=b"x", signing_key=KEY))


def view(first: int = 1, end: int = 11, *, to: int | None = 11, skip: list[int] | None = None,
         flt: str | None = None) -> ReplayView:
    reg = ReplayRegistration(v=1, replay_id=9, stream_id=S, namespace=S, requester="alice", from_sequence=first,
                           to_sequence=to, first=first, end_exclusive=end, end_id=None if to else end - 1,
                           filter=flt, skip=skip, memo_hex="", price_cby=0, block_height=1, caller="alice", nonce=1,
                           digest_hex="00" * 32)
    return (apply_replay_record({}, reg) or {})[9]


def archive(seqs: list[int], start: int = 0) -> list[ArchivedRecord]:
    return [ArchivedRecord(start + i, raw(s), [("h", b"v")]) for i, s in enumerate(seqs)]


def test_a_slice_delivers_in_order_with_appended_headers_and_checkpoints() -> None:
    v = view(to=None)
    out = fulfil_slice(v, selector_for(v), 2, archive([1, 2, 3]), at_end=False, now_ms=5)
    assert [d.sequence for d in out.deliveries] == [1, 2, 3]
    assert out.deliveries[0].key == b"alice"
    assert out.deliveries[0].headers == [("h", b"v"), ("icrc77:replay", b"true"), ("icrc77:replay:id", b"9"),
                                         ("icrc77:replay:end_id", b"10")]
    assert out.deliveries[0].value == raw(1)
    assert isinstance(out.record, ReplayProgress)
    assert (out.record.next_offset, out.record.next_sequence, out.record.delivered, out.record.partition) == (
        3, 4, 3, 2)


def test_reaching_the_end_of_the_plan_completes_and_stops_reading() -> None:
    v = view(first=3, end=6, to=6)
    out = fulfil_slice(v, selector_for(v), 0, archive([1, 2, 3, 4, 5, 6, 7]), at_end=False, now_ms=5)
    assert [d.sequence for d in out.deliveries] == [3, 4, 5]
    assert isinstance(out.record, ReplayCompleted)
    assert out.examined == 5


def test_other_streams_and_undecodable_records_are_passed_over() -> None:
    v = view(first=1, end=3, to=3)
    records = [ArchivedRecord(0, raw(1, "s-other"), None), ArchivedRecord(1, b"\x00junk", None),
               ArchivedRecord(2, raw(1), None), ArchivedRecord(3, raw(2), None)]
    out = fulfil_slice(v, selector_for(v), 0, records, at_end=False, now_ms=5)
    assert [d.sequence for d in out.deliveries] == [1, 2]
    assert [o for o, _ in out.quarantined] == [1]
    assert isinstance(out.record, ReplayCompleted)


def test_a_missing_sequence_errors_the_replay_with_a_reason() -> None:
    v = view()
    out = fulfil_slice(v, selector_for(v), 0, archive([1, 2, 4]), at_end=False, now_ms=5)
    assert [d.sequence for d in out.deliveries] == [1, 2]
    assert isinstance(out.record, ReplayErrored)
    assert "lacks sequence 3" in out.record.reason
    assert out.record.delivered == 2


def test_the_archive_ending_before_the_plan_errors_but_a_full_slice_does_not() -> None:
    v = view()
    ended = fulfil_slice(v, selector_for(v), 0, archive([1, 2]), at_end=True, now_ms=5)
    assert isinstance(ended.record, ReplayErrored)
    assert "ends" in ended.record.reason
    more = fulfil_slice(v, selector_for(v), 0, archive([1, 2]), at_end=False, now_ms=5)
    assert isinstance(more.record, ReplayProgress)


def test_a_checkpoint_resumes_where_it_stopped() -> None:
    v = view()
    first = fulfil_slice(v, selector_for(v), 0, archive([1, 2, 3]), at_end=False, now_ms=5)
    assert first.record is not None
    v2 = (apply_replay_record({9: v}, first.record) or {})[9]
    second = fulfil_slice(v2, selector_for(v2), 0, archive([4, 5], start=3), at_end=False, now_ms=6)
    assert [d.sequence for d in second.deliveries] == [4, 5]
    assert (apply_replay_record({9: v2}, second.record) or {})[9].next_offset == 5  # type: ignore[arg-type]


def test_skip_and_filter_are_counted() -> None:
    v = view(skip=[2, 0], flt='{"field":"kind","op":"eq","value":"x"}')
    out = fulfil_slice(v, selector_for(v), 0, archive(list(range(1, 11))), at_end=False, now_ms=5)
    assert out.deliveries == []
    assert isinstance(out.record, ReplayCompleted)
    assert (out.record.skipped, out.record.filtered) == (5, 5)


def test_cancel_and_spark_decisions() -> None:
    v = view()
    assert cancel_record(v, 7).delivered == 0
    assert spark_threshold({}) == 250_000
    assert spark_threshold({"WATCHTOWER_SPARK_REPLAY_THRESHOLD": "0"}) == 0
    assert wants_spark(v, 5)
    assert not wants_spark(v, 10)
    assert not wants_spark(v, 0)
