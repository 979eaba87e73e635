"""The quarantining fold: a genuine log folds to the live state; a record that breaks a rule is
refused with its reason and the fold goes on from the last valid state; nothing raises.

Pure: events are produced by the real ``decide`` and encoded as the worker encodes them; no broker.
"""

from __future__ import annotations

import json
from typing import Any

import nacl.signing
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import Command, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import Event, StreamState, decide, evolve, state_digest
from watchtower.schemas import codec
from watchtower.schemas.events import event_record
from watchtower.schemas.wire import encode_event
from watchtower.topics.partitioning import partition_for_key
from watchtower.workers.event_fold import EventFold, Quarantined

TOPIC = "t.events"
PARTITIONS = 3
SID = "fold-prices"
HOME = partition_for_key(SID.encode(), PARTITIONS)
OWNER = nacl.signing.SigningKey(b"\x21" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x22" * 32)
ROTATED = nacl.signing.SigningKey(b"\x23" * 32)


class Log:
    """A stream's events as the worker writes them: decided one command at a time."""

    def __init__(self) -> None:
        self.state = StreamState.initial(SID)
        self.events: list[Event] = []
        self.nonce = 0

    def command(self, method: str, body: dict[str, Any]) -> Event:
        self.nonce += 1
        cmd = sign_command(OWNER, method, SID, self.nonce, body)
        (event,) = decide(self.state, cmd, block_height=7).events
        self.state = evolve(self.state, event)
        self.events.append(event)
        return event

    def create(self) -> Event:
        return self.command("create_stream", {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex()})

    def publish(self, key: nacl.signing.SigningKey = PUBLISHER, signing_key_id: int = 1) -> Event:
        msg = sign_message(stream_id=SID, sequence=self.state.head + 1, timestamp_unix_ms=1_790_000_000_000,
                           kind="tick", payload=b'{"p":%d}' % (self.state.head + 1), signing_key=key,
                           signing_key_id=signing_key_id, tags={"n": 1})
        return self.command("publish", msg.to_json_dict())


def genuine(publishes: int = 2) -> Log:
    log = Log()
    log.create()
    for _ in range(publishes):
        log.publish()
    return log


def fold_of(log: Log, *extra: tuple[bytes | None, bytes | None]) -> tuple[EventFold, list[Quarantined]]:
    """Fold the log's events, then the extra (key, value) records; return the fold and its refusals."""
    fold = EventFold(TOPIC, HOME, PARTITIONS)
    offset = 0
    for event in log.events:
        assert fold.apply(SID.encode(), encode_event(event), offset) is None
        offset += 1
    refused = []
    for key, value in extra:
        entry = fold.apply(key, value, offset)
        if entry is not None:
            refused.append(entry)
        offset += 1
    return fold, refused


def record_of(event: Event) -> dict[str, Any]:
    """The event's Avro record, with its schema's name under ``type``: what a forger with the
    public schemas edits."""
    return {"type": event.type, **event_record(event)}


def encoded(obj: dict[str, Any]) -> bytes:
    """`obj` (a `record_of`) written with the schema it names, field by field (`codec.encode`)."""
    fields = {k: v for k, v in obj.items() if k != "type"}
    return codec.encode(obj["type"], fields)


def forged(event: Event, edit: Any) -> bytes:
    """The event's wire bytes after ``edit`` changed its Avro record, encoded as a forger with the
    public schemas would."""
    obj = record_of(event)
    edit(obj)
    return encoded(obj)


def test_a_genuine_log_folds_to_the_live_state() -> None:
    log = genuine(3)
    fold, refused = fold_of(log)
    assert refused == []
    assert state_digest(fold.state.streams[SID]) == state_digest(log.state)


def test_a_log_with_a_key_rotation_folds_to_the_live_state() -> None:
    log = genuine(2)
    log.command("rotate_publisher_key", {"new_key": bytes(ROTATED.verify_key)})
    log.publish(ROTATED, signing_key_id=2)
    fold, refused = fold_of(log)
    assert refused == []
    assert fold.state.streams[SID].head == 3
    assert state_digest(fold.state.streams[SID]) == state_digest(log.state)


def test_a_copy_of_the_last_event_is_quarantined_and_the_fold_goes_on() -> None:
    log = genuine(2)
    copy = encode_event(log.events[-1])
    fold, refused = fold_of(log, (SID.encode(), copy))
    assert [(q.topic, q.partition, q.offset) for q in refused] == [(TOPIC, HOME, len(log.events))]
    assert "does not follow head" in refused[0].reason  # a copied publish is not head + 1
    assert fold.state.streams[SID].head == 2
    # The owner's next publish (head + 1) still folds on top.
    nxt = log.publish()
    assert fold.apply(SID.encode(), encode_event(nxt), 99) is None
    assert state_digest(fold.state.streams[SID]) == state_digest(log.state)


def test_a_publish_that_skips_a_sequence_is_quarantined() -> None:
    # Publish events refer to their message by sequence and hash; the fold re-proves the log is
    # gapless (message signatures are checked by whoever reads the messages topic).
    log = genuine(2)

    def skip(e: dict[str, Any]) -> None:
        e["sequence"] = 4
        e["caused_by"]["nonce"] += 1  # a fresh nonce, so the gap itself must be caught

    fold, refused = fold_of(log, (SID.encode(), forged(log.events[-1], skip)))
    assert len(refused) == 1
    assert "sequence 4 does not follow head 2" in refused[0].reason
    assert fold.state.streams[SID].head == 2


def test_garbage_is_quarantined_as_a_malformed_record() -> None:
    log = genuine(1)
    fold, refused = fold_of(log, (SID.encode(), b"\x00\xffgarbage"), (SID.encode(), None),
                            (None, b'{"v": 1, "event": {"type": "StreamCreated"}}'))
    assert len(refused) == 3
    assert all(q.reason.startswith("MALFORMED_RECORD") for q in refused)
    assert fold.state.streams[SID].head == 1


def test_an_event_under_another_key_or_on_another_partition_is_quarantined() -> None:
    log = genuine(1)
    nxt = log.publish()
    wrong_key = (b"someone-else", encode_event(nxt))
    _, refused = fold_of(log, wrong_key)
    assert "record key b'someone-else'" in refused[0].reason

    other = (HOME + 1) % PARTITIONS
    elsewhere = EventFold(TOPIC, other, PARTITIONS)
    entry = elsewhere.apply(SID.encode(), encode_event(log.events[0]), 5)
    assert entry is not None
    assert f"belong on partition {HOME}, not {other}" in entry.reason
    assert elsewhere.state.streams == {}


def test_a_feed_registration_reusing_feed_id_1_is_quarantined() -> None:
    home = partition_for_key(REGISTRY_KEY.encode(), PARTITIONS)
    create = sign_command(OWNER, "create_stream", SID, 1, {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(),
                                                         "feed": {"name": "one"}})
    first, _ = decide_registration(RegistryState(), create, block_height=1)
    assert first is not None
    fold = EventFold(TOPIC, home, PARTITIONS)
    key = REGISTRY_KEY.encode()
    assert fold.apply(key, encode_event(first), 0) is None
    entry = fold.apply(key, encode_event(first), 1)  # the same id again
    assert entry is not None
    assert "feed id 1 does not follow 1" in entry.reason
    # The next genuine registration still gets id 2.
    other: Command = sign_command(OWNER, "create_stream", "fold-other", 1,
                                  {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(), "feed": {"name": "two"}})
    second, reply = decide_registration(fold.state.registry, other, block_height=2)
    assert second is not None
    assert reply["feed_id"] == 2
    assert fold.apply(key, encode_event(second), 2) is None
    assert fold.state.registry == evolve_registry(evolve_registry(RegistryState(), first), second)


def test_quarantine_is_reported_as_it_happens() -> None:
    seen: list[Quarantined] = []
    fold = EventFold(TOPIC, HOME, PARTITIONS, on_quarantine=seen.append)
    entry = fold.apply(SID.encode(), b"nope", 42)
    assert seen == [entry] == fold.state.quarantined
    assert entry is not None
    assert entry.to_dict() == {"topic": TOPIC, "partition": HOME, "offset": 42, "reason": entry.reason}


@settings(max_examples=150, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=40)), value=st.one_of(st.none(), st.binary(max_size=300)))
def test_no_bytes_make_the_fold_raise(key: bytes | None, value: bytes | None) -> None:
    log = genuine(1)
    fold, _ = fold_of(log, (key, value))
    assert fold.state.streams[SID].head == 1


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))]
    return [path]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), replacement=st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20),
                                             st.floats(allow_nan=False), st.lists(st.integers(), max_size=3)))
def test_no_edited_event_makes_the_fold_raise(data: st.DataObject, replacement: Any) -> None:
    """Any leaf of a genuine event replaced by any JSON value: refused or applied, never a crash."""
    log = genuine(2)
    obj = record_of(log.events[-1])
    path = data.draw(st.sampled_from(_leaves(obj)))
    target = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = replacement
    try:  # an edit the schemas can carry travels as the codec writes it ...
        value = encoded(obj)
    except (WatchtowerError, KeyError):  # ... any other reaches the log as foreign bytes
        value = json.dumps(obj, default=repr).encode()
    fold, refused = fold_of(log, (SID.encode(), value))
    assert fold.state.streams[SID].head in (2, 3)
    assert len(refused) <= 1


def test_an_event_stamped_more_than_a_day_ahead_is_quarantined_when_the_fold_has_a_clock() -> None:
    """A forged future block would raise its nonce ceiling and lock the caller out (nonce lockout)."""
    log = genuine(1)
    day_of_blocks = 10**9  # far more than a day of blocks at any block interval

    def from_the_future(e: dict[str, Any]) -> None:
        origin = e["caused_by"]
        e.clear()
        e.update(type="SubscriptionPolicyChanged", stream_id=SID, policy="PUBLIC", block_height=7 + day_of_blocks,
                 caused_by={**origin, "nonce": 2**62})

    forged_event = forged(log.events[-1], from_the_future)
    fold = EventFold(TOPIC, HOME, PARTITIONS, now_block_height=7)
    for offset, event in enumerate(log.events):
        assert fold.apply(SID.encode(), encode_event(event), offset) is None
    entry = fold.apply(SID.encode(), forged_event, 9)
    assert entry is not None
    assert "more than a day after the current block" in entry.reason
    # The owner's next command, with an ordinary nonce, still folds on top.
    nxt = log.publish()
    assert fold.apply(SID.encode(), encode_event(nxt), 10) is None
    assert state_digest(fold.state.streams[SID]) == state_digest(log.state)


def test_a_nonce_beyond_its_blocks_ceiling_is_quarantined() -> None:
    log = genuine(1)

    def huge_nonce(e: dict[str, Any]) -> None:
        origin, height = e["caused_by"], e["block_height"]
        e.clear()
        e.update(type="SubscriptionPolicyChanged", stream_id=SID, policy="PUBLIC", block_height=height,
                 caused_by={**origin, "nonce": 2**62})

    _, refused = fold_of(log, (SID.encode(), forged(log.events[-1], huge_nonce)))
    assert len(refused) == 1
    assert "beyond the ceiling" in refused[0].reason
