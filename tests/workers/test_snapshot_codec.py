"""The snapshot codecs: a state survives the round trip exactly; no bytes make decoding do anything
but refuse (MALFORMED_RECORD); nothing is ever unpickled. Pure, no broker."""

from __future__ import annotations

import contextlib
import pickle

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_event_fold import ROTATED, SID, genuine

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.registry import REGISTRY_KEY, RegistryState
from watchtower.protocol.stream.snapshot_cbor import SnapshotError
from watchtower.protocol.stream.snapshots import (
    decode_registry,
    decode_snapshot,
    decode_streams,
    encode_registry,
    encode_snapshot,
    encode_streams,
)
from watchtower.protocol.stream.state import FrozenMap, state_digest

FRIEND = address_from_public_key(bytes(nacl.signing.SigningKey(b"\x31" * 32).verify_key))


def rich_state():  # type: ignore[no-untyped-def]
    log = genuine(3)
    log.command("rotate_publisher_key", {"new_key": bytes(ROTATED.verify_key)})
    log.command("subscribe", {"mode": "PULL", "filter": {"field": "kind", "op": "eq", "value": "tick"}})
    log.command("set_subscription_policy", {"policy": "PRIVATE_ALLOWLIST"})
    log.command("allowlist_add", {"address": FRIEND})
    return log.state


def test_a_stream_state_survives_the_round_trip_exactly() -> None:
    state = rich_state()
    assert state.key_schedule is not None
    assert len(state.key_schedule.entries) == 2
    assert state.last_publish_digest is not None  # an exact retry of the last publish stays a duplicate
    back = decode_streams(encode_streams({SID: state}))
    assert back[SID] == state
    assert state_digest(back[SID]) == state_digest(state)


def test_the_encoding_is_deterministic() -> None:
    state = rich_state()
    assert encode_streams({SID: state}) == encode_streams(dict(decode_streams(encode_streams({SID: state}))))


def test_a_registry_survives_the_round_trip_and_a_gap_in_its_ids_is_refused() -> None:
    registry = RegistryState(3, FrozenMap({"a": 1, "b": 2}))
    assert decode_registry(encode_registry({REGISTRY_KEY: registry})) == {REGISTRY_KEY: registry}
    with pytest.raises(SnapshotError, match="without gaps"):
        decode_registry(encode_registry({REGISTRY_KEY: RegistryState(4, FrozenMap({"a": 1, "b": 3}))}))


def test_the_envelope_round_trips_and_refuses_another_version() -> None:
    value = encode_snapshot(2, 1234, {"stream": b"x"})
    assert decode_snapshot(value) == (2, 1234, {"stream": b"x"})
    import cbor2

    doc = cbor2.loads(value)
    doc["v"] = 2
    with pytest.raises(SnapshotError, match="version"):
        decode_snapshot(cbor2.dumps(doc))


def test_pickled_bytes_are_refused_not_unpickled() -> None:
    class Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (pytest.fail, ("a snapshot was unpickled",))

    data = pickle.dumps({"v": 1, "streams": [Boom()]})
    for decode in (decode_snapshot, decode_streams, decode_registry):
        with pytest.raises(SnapshotError):
            decode(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.recursive(st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=5),
                                              lambda inner: st.lists(inner, max_size=3)
                                              | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                                              max_leaves=12).map(lambda v: __import__("cbor2").dumps(v)))
def test_no_bytes_make_decoding_raise_anything_but_a_refusal(data: bytes) -> None:
    for decode in (decode_snapshot, decode_streams, decode_registry):
        with contextlib.suppress(SnapshotError):
            decode(data)
