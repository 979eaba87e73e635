"""Read-side views, the offset index and the registry: the pure rules the projections run."""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, WatchtowerError
from watchtower.protocol.events import FeedRegistered
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState, decide_registration, evolve_registry
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import Event, StreamState, decide, evolve
from watchtower.protocol.stream.stream_index import StreamIndex
from watchtower.protocol.stream.views import (
    INDEXES,
    TABLE_NAMES,
    apply_event,
    apply_message,
    head_view,
    new_tables,
    stream_subscribers,
    views_digest,
)

OWNER = nacl.signing.SigningKey(b"\x01" * 32)
PUBLISHER = nacl.signing.SigningKey(b"\x02" * 32)


def _events(*commands: tuple[nacl.signing.SigningKey, str, dict[str, Any]]) -> list[Any]:
    state, out = StreamState.initial("s1"), []
    for nonce, (key, method, body) in enumerate(commands, start=1):
        for event in decide(state, sign_command(key, method, "s1", nonce, body), block_height=7).events:
            state = evolve(state, event)
            out.append(event)
    return out


def _tables() -> dict[str, dict[str, Any]]:
    return new_tables()


def _digest(tables: dict[str, dict[str, Any]]) -> str:
    return views_digest({k: v.items() for k, v in tables.items() if k in TABLE_NAMES})


def test_folding_events_again_changes_nothing() -> None:
    subscriber = nacl.signing.SigningKey(b"\x03" * 32)
    events = _events(
        (OWNER, "create_stream", {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex()}),
        (OWNER, "rotate_publisher_key", {"new_key": bytes(nacl.signing.SigningKey(b"\x04" * 32).verify_key)}),
        (subscriber, "subscribe", {"mode": "PULL"}),
        (OWNER, "set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"}),
        (OWNER, "allowlist_add", {"address": "0x" + bytes(subscriber.verify_key).hex()}),
    )
    once, twice, replayed = _tables(), _tables(), _tables()
    for event in events:
        apply_event(once, event)
        apply_event(twice, event)
        apply_event(twice, event)
    for event in events + events:  # a whole tail redelivered after later events were folded
        apply_event(replayed, event)
    assert _digest(once) == _digest(twice) == _digest(replayed)
    view = once["streams"]["s1"]
    assert [e["signing_key_id"] for e in view["key_schedule"]["entries"]] == [1, 2]
    assert (view["subscribers"], view["active_subscribers"], view["policy"]) == (1, 1, "PRIVATE_ALLOWLIST")
    assert [s["status"] for s in stream_subscribers(once["subscriptions"].items(), "s1")] == ["ACTIVE"]
    assert head_view(view, None)["signing_key_id"] == 2
    # A read that passes the fold's typed key schedule answers exactly what parsing the view gives.
    typed = once[INDEXES]["s1"].state.key_schedule
    assert head_view(view, {"head": 3}, typed) == head_view(view, {"head": 3})


def _created(capacity: int) -> dict[str, dict[str, Any]]:
    """Tables holding stream s1, created with `capacity`."""
    create = sign_command(OWNER, "create_stream", "s1", 1,
                          {"publisher_key": bytes(PUBLISHER.verify_key), "ring_buffer_capacity": capacity})
    tables = new_tables()
    (event,) = decide(StreamState.initial("s1"), create, block_height=1).events
    apply_event(tables, event)
    return tables


def test_offset_index_prunes_to_the_floor_and_ignores_redeliveries() -> None:
    tables = _created(capacity=10)
    for seq in range(1, 26):
        assert apply_message(tables, "s1", seq, 100 + 3 * seq)
    assert not apply_message(tables, "s1", 20, 160)  # a redelivery changes nothing
    index = tables[INDEXES]["s1"]
    assert (index.low, index.high, len(index)) == (16, 25, 10)
    assert index.offset_of(15) is None
    assert index.offset_of(16) == 148
    assert tables["offsets"]["s1"] == {"head": 25, "floor": 16, "capacity": 10, "head_offset": 175,
                                       "floor_offset": 148}
    assert (tables["heads"]["s1"]["head"], tables["heads"]["s1"]["floor"]) == (25, 16)


def test_offset_index_restarts_at_a_jump_and_keeps_the_floor_offset_as_a_lower_bound() -> None:
    tables = _created(capacity=10)
    tables["offsets"]["s1"] = {"head": 5, "floor": 1, "capacity": 10, "head_offset": 50, "floor_offset": 10}
    assert apply_message(tables, "s1", 6, 60)  # a restarted projection: offsets recovered, index empty
    index = tables[INDEXES]["s1"]
    assert (index.low, index.high) == (6, 6)
    assert tables["offsets"]["s1"]["floor_offset"] == 10  # floor 1 is not indexed here: keep the known bound


def test_an_indexed_message_releases_the_references_at_or_below_it() -> None:
    index = StreamIndex("s1")
    index.refs.update({seq: (seq,) for seq in range(3, 8)})
    index.bound(5)
    assert list(index.refs) == [6, 7]
    index.bound(9)
    assert index.refs == {}


def _create(key: nacl.signing.SigningKey, sid: str, listing: object) -> Any:
    body = {"publisher_key_hex": bytes(PUBLISHER.verify_key).hex(), "feed": listing}
    return sign_command(key, "create_stream", sid, 1, body)


def test_registry_assigns_sequential_ids_once_per_stream() -> None:
    state = RegistryState()
    ids = []
    for sid in ("a", "b"):
        event, reply = decide_registration(state, _create(OWNER, sid, {"name": sid}), block_height=3)
        assert event is not None
        state = evolve_registry(state, event)
        ids.append(reply["feed_id"])
    again, reply = decide_registration(state, _create(OWNER, "a", {"name": "a"}), block_height=4)
    assert ids == [1, 2]
    assert again is None
    assert (reply["feed_id"], reply["duplicate"]) == (1, True)


def test_registry_refuses_bad_listings_and_forged_signatures() -> None:
    with pytest.raises(InvalidArgumentError, match=r"feed\.name"):
        decide_registration(RegistryState(), _create(OWNER, "a", {"name": ""}), block_height=1)
    cmd = _create(OWNER, "a", {"name": "a"})
    forged = type(cmd)(cmd.method, cmd.stream_id, bytes(PUBLISHER.verify_key), cmd.nonce, cmd.body, cmd.signature)
    with pytest.raises(InvalidSignatureError):
        decide_registration(RegistryState(), forged, block_height=1)


def test_a_bad_listing_fails_the_stream_creation_itself() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown feed field"):
        decide(StreamState.initial("s1"), _create(OWNER, "s1", {"name": "x", "tags": 1}), block_height=1)


def test_the_writer_and_the_view_refuse_the_same_forged_listing_and_keep_later_ids() -> None:
    """A forged FeedRegistered listing an already-listed stream under the next id is refused by both
    folds, so the genuine next listing (which the live writer gave that id) is kept by both."""
    def listing(feed_id: int, stream_id: str) -> Event:
        return Event(stream_id=REGISTRY_KEY, block_height=1, caller=OWNER_ADDR, nonce=feed_id, digest=bytes(32),
                     reply={}, body=FeedRegistered(feed_id=feed_id, stream_id=stream_id, owner=OWNER_ADDR,
                                                   name=f"f{feed_id}", description=""))

    genuine1, forged2, genuine2 = listing(1, "s-a"), listing(2, "s-a"), listing(2, "s-b")
    state = evolve_registry(RegistryState(), genuine1)
    with pytest.raises(InvalidArgumentError):
        evolve_registry(state, forged2)
    assert evolve_registry(state, genuine2).by_stream["s-b"] == 2
    tables = new_tables()
    apply_event(tables, genuine1, offset=0)
    with pytest.raises(WatchtowerError):
        apply_event(tables, forged2, offset=1)
    apply_event(tables, genuine2, offset=2)
    assert sorted(tables["registry"]) == ["1", "2"]
    assert tables["registry"]["2"]["stream_id"] == "s-b"


OWNER_ADDR = address_from_public_key(b"\x09" * 32)
