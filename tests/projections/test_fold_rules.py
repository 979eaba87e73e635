"""The fold's rules on hostile logs, without a broker: what is refused, and that the decisions do not
depend on the order in which the events and messages topics happen to be read."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.schemas.wire import encode_event
from watchtower.projections import quarantine
from watchtower.projections.fold import Folder
from watchtower.protocol.registry import RegistryState, decide_registration
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream_actor import Event, StreamState, decide, evolve
from watchtower.protocol.view_checks import ACCEPT, DEFER, QUARANTINE, SKIP, RuleBrokenError, message_verdict
from watchtower.protocol.views import TABLE_NAMES, apply_event, views_digest
from watchtower.schemas.records import encode_message

SID = "s1"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
KEYS = [nacl.signing.SigningKey(bytes([0x10 + i]) * 32) for i in range(2)]
STRANGER = nacl.signing.SigningKey(b"\x07" * 32)

Record = tuple[str, bytes, bytes]  # (topic, key, value)


def _log() -> tuple[list[Record], list[Record]]:
    """A stream's genuine events and messages (5 publishes, a key rotation after 3) plus forged records."""
    state, nonce = StreamState.initial(SID), 0
    events: list[Record] = []
    messages: list[Record] = []

    def run(method: str, body: dict[str, Any]) -> None:
        nonlocal state, nonce
        nonce += 1
        for event in decide(state, sign_command(OWNER, method, SID, nonce, body), block_height=5).events:
            state = evolve(state, event)
            events.append(("events", SID.encode(), encode_event(event)))
            if event.type == "StreamMessagePublished":
                messages.append(("messages", SID.encode(), encode_message(event.message())))

    run("create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()})
    for seq in range(1, 6):
        if seq == 4:
            run("rotate_publisher_key", {"new_key": bytes(KEYS[1].verify_key)})
        msg = sign_message(stream_id=SID, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=KEYS[seq >= 4], signing_key_id=1 + (seq >= 4))
        run("publish", msg.to_json_dict())
    # Forged messages records: a replay of sequence 1, a stranger's signature for sequence 3 placed
    # before the genuine 3, the old key signing sequence 5 after the rotation, garbage, a wrong key.
    forged_3 = sign_message(stream_id=SID, sequence=3, timestamp_unix_ms=3, kind="t", payload=b"{}",
                            signing_key=STRANGER)
    old_key_5 = sign_message(stream_id=SID, sequence=5, timestamp_unix_ms=5, kind="t", payload=b"x",
                             signing_key=KEYS[0], signing_key_id=2)
    messages.insert(2, ("messages", SID.encode(), encode_message(forged_3)))
    messages.insert(5, ("messages", SID.encode(), messages[0][2]))
    messages.insert(6, ("messages", SID.encode(), encode_message(old_key_5)))
    messages.append(("messages", SID.encode(), b"\x00not a record"))
    messages.append(("messages", b"other", messages[1][2]))
    # Forged events: a copy of publish 2 claiming sequence 6, and an old publish replayed.
    publish_2 = json.loads(events[2][2])
    publish_2["event"]["body"]["sequence"] = 6
    events.append(("events", SID.encode(), json.dumps(publish_2).encode()))
    events.append(("events", SID.encode(), events[1][2]))
    return events, messages


def _fold(events: list[Record], messages: list[Record], order: list[bool],
          tables_out: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    refused: dict[str, Any] = {}
    folder = Folder(tables, refused, t_events="events", t_messages="messages", partitions=1)
    queues = {"events": list(enumerate(events)), "messages": list(enumerate(messages))}
    picks = iter(order)
    while queues["events"] or queues["messages"]:
        topic = "events" if not queues["messages"] or (queues["events"] and next(picks, True)) else "messages"
        offset, (_t, key, value) = queues[topic].pop(0)
        (folder.fold_event if topic == "events" else folder.fold_message)(0, offset, key, value)
    if tables_out is not None:
        tables_out.update(tables)
    return views_digest({k: v.items() for k, v in tables.items()}), quarantine.summary(refused.items())


LOG = _log()


def test_the_genuine_stream_is_folded_and_every_forged_record_refused() -> None:
    events, messages = LOG
    tables: dict[str, Any] = {}
    _digest, refused = _fold(events, messages, [True] * 100, tables)  # every event first
    assert tables["heads"][SID]["head"] == tables["offsets"][SID]["head"] == 5
    assert [e["signing_key_id"] for e in tables["streams"][SID]["key_schedule"]["entries"]] == [1, 2]
    assert refused["count"] == 7
    reasons = sorted(r["reason"] for r in refused["recent"] if r["topic"] == "messages")
    assert any("already indexed" in r for r in reasons)
    assert any("does not verify" in r for r in reasons)
    assert any("undecodable" in r for r in reasons)
    assert any("keyed b'other'" in r for r in reasons)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=40, max_size=40))
def test_decisions_do_not_depend_on_how_the_two_topics_interleave(order: list[bool]) -> None:
    events, messages = LOG
    assert _fold(events, messages, order) == _fold(events, messages, [True] * 100)


def test_messages_read_before_their_events_wait_and_are_then_decided_in_log_order() -> None:
    events, messages = LOG
    assert _fold(events, messages, [False] * 100) == _fold(events, messages, [True] * 100)


def _events_of(*commands: tuple[nacl.signing.SigningKey, str, dict[str, Any]]) -> list[Event]:
    state, out = StreamState.initial(SID), []
    for nonce, (key, method, body) in enumerate(commands, start=1):
        for event in decide(state, sign_command(key, method, SID, nonce, body), block_height=7).events:
            state = evolve(state, event)
            out.append(event)
    return out


def _tables() -> dict[str, dict[str, Any]]:
    return {name: {} for name in TABLE_NAMES}


def test_a_feed_id_is_given_out_once_and_in_order() -> None:
    create = sign_command(OWNER, "create_stream", SID, 1, {"publisher_key_hex": "00" * 32, "feed": {"name": "a"}})
    event, _reply = decide_registration(RegistryState(), create, block_height=1)
    assert event is not None
    tables = _tables()
    apply_event(tables, event)
    apply_event(tables, event)  # a redelivery changes nothing
    reuse = dataclasses.replace(event, body={**event.body, "stream_id": "other"})
    gap = dataclasses.replace(event, body={**event.body, "stream_id": "other", "feed_id": 3})
    for forged, reason in ((reuse, "reuses feed id 1"), (gap, "does not follow")):
        with pytest.raises(RuleBrokenError, match=reason):
            apply_event(tables, forged)
    assert tables["registry"]["1"]["stream_id"] == SID


def test_events_that_contradict_the_views_are_refused_without_changing_them() -> None:
    create, publish = _events_of(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()}),
        (OWNER, "publish", sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                                        signing_key=KEYS[0]).to_json_dict()),
    )
    tables = _tables()
    with pytest.raises(RuleBrokenError, match="never created"):
        apply_event(tables, publish, offset=1)
    apply_event(tables, create, offset=0)
    other_config = {**create.body["config"], "ring_buffer_capacity": 5}
    with pytest.raises(RuleBrokenError, match="already exists"):
        apply_event(tables, dataclasses.replace(create, body={"config": other_config}), offset=1)
    before = views_digest({k: v.items() for k, v in tables.items()})
    assert apply_event(tables, publish, offset=2) is not None
    with pytest.raises(RuleBrokenError, match="does not follow head 1"):
        apply_event(tables, publish, offset=3)  # the same publish again, later in the log: a replay
    assert apply_event(tables, publish, offset=2) is None  # a redelivery of the one folded
    assert tables["heads"][SID]["head"] == 1
    assert views_digest({k: v.items() for k, v in tables.items()}) != before


def test_message_verdicts() -> None:
    create, publish = _events_of(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()}),
        (OWNER, "publish", sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                                        signing_key=KEYS[0]).to_json_dict()),
    )
    tables = _tables()
    apply_event(tables, create)
    view, message = tables["streams"][SID], publish.message()
    assert message_verdict(SID, 9, message, None, 0, None)[0] == DEFER
    assert message_verdict(SID, 9, message, view, 0, None)[0] == DEFER
    assert message_verdict(SID, 9, message, view, 1, None)[0] == ACCEPT
    assert message_verdict("other", 9, message, view, 1, None)[0] == QUARANTINE
    located = {"head": 1, "head_offset": 9}
    assert message_verdict(SID, 9, message, view, 1, located)[0] == SKIP
    assert message_verdict(SID, 12, message, view, 1, located)[0] == QUARANTINE
    forged = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                          signing_key=STRANGER)
    assert message_verdict(SID, 9, forged, view, 1, None)[0] == QUARANTINE
