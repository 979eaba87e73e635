"""The fold's rules on hostile logs, without a broker: what is refused, and that the decisions do not
depend on the order in which the events and messages topics happen to be read.

Publish events here carry only the reference to their message (no ``message`` body key), as the
writer writes them: the payload comes from the messages topic alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recording_folder import RecordingFolder

from watchtower.projections import quarantine
from watchtower.protocol.command_auth import nonce_ceiling
from watchtower.protocol.registry import RegistryState, decide_registration
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import Event, StreamState, decide, evolve
from watchtower.protocol.stream.key_chain import command_json, key_chain_from_json, verify_key_chain
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.state import state_digest
from watchtower.protocol.stream.view_checks import (
    ACCEPT,
    DEFER,
    QUARANTINE,
    SKIP,
    RuleBrokenError,
    message_verdict,
    published_ref,
)
from watchtower.protocol.stream.views import INDEXES, TABLE_NAMES, apply_event, new_tables, views_digest
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import encode_event

SID = "s1"
OWNER = nacl.signing.SigningKey(b"\x01" * 32)
KEYS = [nacl.signing.SigningKey(bytes([0x10 + i]) * 32) for i in range(2)]
STRANGER = nacl.signing.SigningKey(b"\x07" * 32)

Record = tuple[str, bytes, bytes]  # (topic, key, value)


def rebody(event: Event, **changes: Any) -> Event:
    """`event` with some of its body's fields changed (a forged record, for the rules to refuse)."""
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))


def _log() -> tuple[list[Record], list[Record]]:
    """A stream's genuine events and messages (5 publishes, a key rotation after 3) plus forged records."""
    state, nonce = StreamState.initial(SID), 0
    events: list[Record] = []
    messages: list[Record] = []

    def run(method: str, body: dict[str, Any]) -> None:
        nonlocal state, nonce
        nonce += 1
        decision = decide(state, sign_command(OWNER, method, SID, nonce, body), block_height=5)
        for event in decision.events:
            state = evolve(state, event)
            events.append(("events", SID.encode(), encode_event(event)))
        messages.extend(("messages", SID.encode(), encode_message(m)) for m in decision.messages)

    run("create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()})
    for seq in range(1, 6):
        if seq == 4:
            run("rotate_publisher_key", {"new_key": bytes(KEYS[1].verify_key)})
        msg = sign_message(stream_id=SID, sequence=seq, timestamp_unix_ms=seq, kind="t", payload=b"{}",
                           signing_key=KEYS[seq >= 4], signing_key_id=1 + (seq >= 4))
        run("publish", msg.to_json_dict())
    # Forged messages records: a replay of sequence 1, a stranger's signature for sequence 3 placed
    # before the genuine 3, the old key signing sequence 5 after the rotation, garbage, a wrong key,
    # and a message for sequence 2 validly signed by the publisher but not the one its event names.
    forged_3 = sign_message(stream_id=SID, sequence=3, timestamp_unix_ms=3, kind="t", payload=b"{}",
                            signing_key=STRANGER)
    old_key_5 = sign_message(stream_id=SID, sequence=5, timestamp_unix_ms=5, kind="t", payload=b"x",
                             signing_key=KEYS[0], signing_key_id=2)
    other_2 = sign_message(stream_id=SID, sequence=2, timestamp_unix_ms=2, kind="t", payload=b"{\"x\":1}",
                           signing_key=KEYS[0])
    messages.insert(1, ("messages", SID.encode(), encode_message(other_2)))
    messages.insert(3, ("messages", SID.encode(), encode_message(forged_3)))
    messages.insert(6, ("messages", SID.encode(), messages[0][2]))
    messages.insert(7, ("messages", SID.encode(), encode_message(old_key_5)))
    messages.append(("messages", SID.encode(), b"\x00not a record"))
    messages.append(("messages", b"other", messages[2][2]))
    # Forged events: a copy of publish 2 claiming sequence 6 (under the key in force at 2, not at 6),
    # and an old publish replayed.
    publish_2 = _events_in(events)[2]
    forged_6 = rebody(publish_2, sequence=6)
    events.append(("events", SID.encode(), encode_event(forged_6)))
    events.append(("events", SID.encode(), events[1][2]))
    return events, messages


def _events_in(events: list[Record]) -> list[Event]:
    from watchtower.schemas.wire import decode_event
    return [decode_event(value) for _t, _k, value in events]


def _fold(events: list[Record], messages: list[Record], order: list[bool],
          tables_out: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Fold the two topics interleaved as `order` says (True: the next events record).

    Returns the digest and ``{"count", "recent", "all"}``: the quarantine summary plus every
    quarantine decision in log position order.
    """
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLE_NAMES}
    refused: dict[str, Any] = {}
    folder = RecordingFolder(tables, refused, t_events="events", t_messages="messages", partitions=1)
    queues = {"events": list(enumerate(events)), "messages": list(enumerate(messages))}
    picks = iter(order)
    while queues["events"] or queues["messages"]:
        topic = "events" if not queues["messages"] or (queues["events"] and next(picks, True)) else "messages"
        offset, (_t, key, value) = queues[topic].pop(0)
        (folder.fold_event if topic == "events" else folder.fold_message)(0, offset, key, value)
    if tables_out is not None:
        tables_out.update(tables, **{INDEXES: folder.indexes})
    summary = quarantine.summary(refused.items())
    return views_digest({k: v.items() for k, v in tables.items()}), {"count": summary["count"],
                                                                     "all": sorted(folder.decisions)}


LOG = _log()


def test_the_genuine_stream_is_folded_and_every_forged_record_refused() -> None:
    events, messages = LOG
    tables: dict[str, Any] = {}
    _digest, refused = _fold(events, messages, [True] * 100, tables)  # every event first
    assert tables["heads"][SID]["head"] == tables["offsets"][SID]["head"] == 5
    assert [e["signing_key_id"] for e in tables["streams"][SID]["key_schedule"]["entries"]] == [1, 2]
    assert refused["count"] == 8
    reasons = sorted(r for t, _o, r in refused["all"] if t == "messages")
    assert any("already indexed" in r for r in reasons)
    assert any("does not verify" in r for r in reasons)
    assert any("undecodable" in r for r in reasons)
    assert any("keyed b'other'" in r for r in reasons)
    event_reasons = [r for t, _o, r in refused["all"] if t == "events"]
    assert any("key 2 is in force" in r for r in event_reasons)
    assert any("does not follow head 5" in r for r in event_reasons)


def test_a_validly_signed_message_that_is_not_the_one_its_event_names_is_quarantined() -> None:
    events, messages = LOG
    genuine_and_other_2 = [messages[i] for i in (0, 1, 2, 4, 5, 8)]  # other_2 at offset 1, genuine 2 at 2
    for order in ([True] * 100, [False] * 100):  # its event folded before it, and after it
        tables: dict[str, Any] = {}
        _digest, refused = _fold(events[:-2], genuine_and_other_2, order, tables)
        reason = "message s1#2 does not match its publish event (payload_hash differ)"
        assert refused["all"] == [("messages", 1, reason)]
        assert tables[INDEXES][SID].offset_of(2) == 2  # the genuine sequence 2, later in the log, is served
        assert tables["heads"][SID]["head"] == 5


def test_the_payload_comes_from_the_messages_topic_and_the_head_moves_when_it_is_indexed() -> None:
    events, messages = LOG
    tables: dict[str, Any] = {}
    _fold(events, [], [], tables)  # the events alone: every publish is referenced, none readable
    assert (tables["heads"][SID]["published"], tables["heads"][SID]["head"]) == (5, 0)
    assert SID not in tables["offsets"]
    _fold(events, messages[:3], [True] * 100, tables)  # messages 1 and 2 (and the mismatched 2)
    assert (tables["heads"][SID]["published"], tables["heads"][SID]["head"]) == (5, 2)
    assert len(tables[INDEXES][SID].refs) == 3  # sequences 3-5 still wait for their message


def test_the_projection_folds_stream_facts_with_the_writers_evolve() -> None:
    events, messages = LOG
    tables: dict[str, Any] = {}
    _fold(events, messages, [True] * 100, tables)
    state = StreamState.initial(SID)
    for event in _events_in(events)[:-2]:  # the genuine events, as the writer folds them
        state = evolve(state, event)
    assert state_digest(tables[INDEXES][SID].state) == state_digest(state)
    view = tables["streams"][SID]
    assert view["key_schedule"] == KeySchedule.to_dict(state.key_schedule)  # type: ignore[arg-type]
    assert view["config"]["publisher_key_hex"] == bytes(KEYS[1].verify_key).hex()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=40, max_size=40))
def test_decisions_do_not_depend_on_how_the_two_topics_interleave(order: list[bool]) -> None:
    events, messages = LOG
    assert _fold(events, messages, order) == _fold(events, messages, [True] * 100)


def test_messages_read_before_their_events_wait_and_are_then_decided_in_log_order() -> None:
    events, messages = LOG
    assert _fold(events, messages, [False] * 100) == _fold(events, messages, [True] * 100)


def _events_of(*commands: tuple[nacl.signing.SigningKey, str, dict[str, Any]]) -> list[Event]:
    """The events the writer decides for `commands`, publish events holding only their reference."""
    state, out = StreamState.initial(SID), []
    for nonce, (key, method, body) in enumerate(commands, start=1):
        for event in decide(state, sign_command(key, method, SID, nonce, body), block_height=7).events:
            state = evolve(state, event)
            out.append(event)
    return out


def _publish_1() -> tuple[Event, Event, StreamMessage]:
    message = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                           signing_key=KEYS[0])
    create, publish = _events_of(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()}),
        (OWNER, "publish", message.to_json_dict()),
    )
    return create, publish, message


def test_a_feed_id_is_given_out_once_and_in_order() -> None:
    create = sign_command(OWNER, "create_stream", SID, 1, {"publisher_key_hex": "00" * 32, "feed": {"name": "a"}})
    event, _reply = decide_registration(RegistryState(), create, block_height=1)
    assert event is not None
    tables = new_tables()
    apply_event(tables, event)
    apply_event(tables, event)  # a redelivery changes nothing
    reuse = rebody(event, stream_id="other")
    gap = rebody(event, stream_id="other", feed_id=3)
    for forged, reason in ((reuse, "reuses feed id 1"), (gap, "does not follow")):
        with pytest.raises(RuleBrokenError, match=reason):
            apply_event(tables, forged)
    assert tables["registry"]["1"]["stream_id"] == SID


def test_events_that_contradict_the_views_are_refused_without_changing_them() -> None:
    create, publish, _message = _publish_1()
    tables = new_tables()
    with pytest.raises(RuleBrokenError, match="never created"):
        apply_event(tables, publish, offset=1)
    assert tables[INDEXES] == {}  # a refused event leaves no state behind (forged stream ids cost nothing)
    apply_event(tables, create, offset=0)
    other_config = dataclasses.replace(create.body.config, ring_buffer_capacity=5)
    with pytest.raises(RuleBrokenError, match="already exists"):
        apply_event(tables, rebody(create, config=other_config), offset=1)
    before = views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES})
    assert apply_event(tables, publish, offset=2) == 1
    with pytest.raises(RuleBrokenError, match="does not follow head 1"):
        apply_event(tables, publish, offset=3)  # the same publish again, later in the log: a replay
    assert apply_event(tables, publish, offset=2) is None  # a redelivery of the one folded
    assert tables["heads"][SID]["published"] == 1
    assert views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES}) != before


def test_an_event_the_writers_evolve_refuses_is_refused_by_the_view_too() -> None:
    create, policy = _events_of(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()}),
        (OWNER, "set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"}),
    )
    tables = new_tables()
    apply_event(tables, create, offset=0)
    before = views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES})
    beyond = dataclasses.replace(policy, nonce=nonce_ceiling(policy.block_height) + 1)  # decide never allows it
    with pytest.raises(RuleBrokenError, match="beyond the ceiling"):
        apply_event(tables, beyond, offset=1)
    assert views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES}) == before
    apply_event(tables, policy, offset=2)
    assert tables["streams"][SID]["policy"] == "PRIVATE_ALLOWLIST"


def test_message_verdicts() -> None:
    create, publish, message = _publish_1()
    tables = new_tables()
    apply_event(tables, create)
    schedule = tables[INDEXES][SID].state.key_schedule
    ref = published_ref(publish.body)
    assert message_verdict(SID, 9, message, None, 0, None, None)[0] == DEFER
    assert message_verdict(SID, 9, message, schedule, 0, None, None)[0] == DEFER
    assert message_verdict(SID, 9, message, schedule, 1, None, ref)[0] == ACCEPT
    assert message_verdict(SID, 9, message, schedule, 1, None, None)[0] == QUARANTINE
    assert message_verdict("other", 9, message, schedule, 1, None, ref)[0] == QUARANTINE
    located = {"head": 1, "head_offset": 9}
    assert message_verdict(SID, 9, message, schedule, 1, located, ref)[0] == SKIP
    assert message_verdict(SID, 12, message, schedule, 1, located, ref)[0] == QUARANTINE
    forged = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                          signing_key=STRANGER)
    assert message_verdict(SID, 9, forged, schedule, 1, None, ref) == (
        QUARANTINE, "message s1#1 does not verify under the key in force at its sequence (signing key 1)")
    later = sign_message(stream_id=SID, sequence=1, timestamp_unix_ms=2, kind="t", payload=b"{}",
                         signing_key=KEYS[0])
    assert message_verdict(SID, 9, later, schedule, 1, None, ref) == (
        QUARANTINE, "message s1#1 does not match its publish event (timestamp_unix_ms differ)")


def test_a_forged_reference_for_the_next_sequence_costs_that_sequence_only() -> None:
    """The documented limit (docs/projections.md): a forged publish event for exactly the next sequence
    takes that sequence's slot; the genuine event and message of it are refused, and the next genuine
    publish moves the readable head on."""
    events, messages = LOG
    decoded = _events_in(events)
    create, publish_1, publish_2, publish_3 = decoded[0], decoded[1], decoded[2], decoded[3]
    forged_2 = rebody(publish_1, sequence=2)
    log = [("events", SID.encode(), encode_event(e)) for e in (create, publish_1, forged_2, publish_2, publish_3)]
    genuine = [messages[i] for i in (0, 2, 4)]  # sequences 1, 2, 3
    tables: dict[str, Any] = {}
    _digest, refused = _fold(log, genuine, [True] * 100, tables)
    assert [(t, o) for t, o, _r in refused["all"]] == [("events", 3), ("messages", 1)]
    assert tables["heads"][SID]["head"] == 3
    assert tables[INDEXES][SID].offset_of(2) is None  # reads of 2 fall back to a verifying log scan


def test_a_rotation_the_owner_did_not_sign_is_refused_by_the_view_and_the_key_chain_is_served() -> None:
    attacker = nacl.signing.SigningKey(b"\x66" * 32)
    create, rotate = _events_of(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(KEYS[0].verify_key).hex()}),
        (OWNER, "rotate_publisher_key", {"new_key": bytes(KEYS[1].verify_key)}),
    )
    tables = new_tables()
    apply_event(tables, create, offset=0)
    before = views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES})
    forged_cmd = sign_command(attacker, "rotate_publisher_key", SID, 2, {"new_key": bytes(attacker.verify_key)})
    forged = dataclasses.replace(rotate, caller=forged_cmd.caller, digest=command_digest(forged_cmd),
                                 body=dataclasses.replace(rotate.body, new_key=bytes(attacker.verify_key),
                                                          command=command_json(forged_cmd)))
    with pytest.raises(RuleBrokenError, match=r"INVALID_SIGNATURE.*not by the owner"):
        apply_event(tables, forged, offset=1)
    assert views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES}) == before
    apply_event(tables, rotate, offset=2)
    served = key_chain_from_json(tables["streams"][SID]["key_schedule"])
    assert [e.public_key for e in verify_key_chain(SID, served).entries] == [bytes(k.verify_key) for k in KEYS[:2]]
