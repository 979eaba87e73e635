"""Fuzzing the decoders: random bytes and mutated valid records raise only the codec's errors.

A worker quarantines (events, messages) or refuses (commands) on these errors; anything else would
crash it or poison the partition. Commands may also be INVALID_ARGUMENT: the envelope was fine but
a field of the signed command was not, which the sender is told to fix.
"""

from __future__ import annotations

import contextlib
import json

import nacl.signing
from avro_strategies import PROPERTY, records_for
from byte_mutations import mutated_bytes
from event_samples import one_of_each
from hypothesis import given
from hypothesis import strategies as st

from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, SchemaMismatchError
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.schemas import codec
from watchtower.schemas.records import decode_message, encode_message
from watchtower.schemas.wire import (
    EVENT_SCHEMAS,
    decode_command,
    decode_event,
    decode_reply,
    encode_command,
    encode_event,
    encode_registry_forward,
    encode_reply,
)

CODEC_ERRORS = (MalformedRecordError, SchemaMismatchError)
KEY = nacl.signing.SigningKey(b"\x03" * 32)
CREATE = sign_command(KEY, "create_stream", "s-1", 1, {"publisher_key": bytes(KEY.verify_key), "n": [1.5, None]})
MESSAGE = sign_message(stream_id="s-1", sequence=1, timestamp_unix_ms=1, kind="k", payload=b'{"p":1}',
                       signing_key=KEY, signing_key_id=1, tags={"a": "b"})


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """`valid` with a few bytes flipped, cut, inserted or dropped."""
    return draw(mutated_bytes(valid))


def event_samples() -> list[bytes]:
    # Built inside the test (the fixture that gives publishes their reference shape is active there).
    return [encode_event(e) for e in one_of_each()]


@PROPERTY
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_codec_errors(data: bytes) -> None:
    for decode in (decode_event, decode_message, decode_reply):
        with contextlib.suppress(*CODEC_ERRORS):
            decode(data)
    with contextlib.suppress(*CODEC_ERRORS, InvalidArgumentError):
        decode_command(data)


@PROPERTY
@given(st.data())
def test_mutated_events_raise_only_codec_errors(data: st.DataObject) -> None:
    valid = data.draw(st.sampled_from(event_samples()))
    with contextlib.suppress(*CODEC_ERRORS):
        decode_event(data.draw(mutated(valid)))


@PROPERTY
@given(mutated(encode_message(MESSAGE)))
def test_mutated_messages_raise_only_codec_errors(value: bytes) -> None:
    with contextlib.suppress(*CODEC_ERRORS):
        decode_message(value)


@PROPERTY
@given(st.sampled_from([encode_command(CREATE), encode_registry_forward(CREATE)]).flatmap(mutated))
def test_mutated_commands_raise_only_codec_errors_or_invalid_argument(value: bytes) -> None:
    with contextlib.suppress(*CODEC_ERRORS, InvalidArgumentError):
        decode_command(value)


@PROPERTY
@given(st.sampled_from([encode_reply(True, result={"a": [1, 2]}), encode_reply(False, error=InvalidArgumentError("x"))])
       .flatmap(mutated))
def test_mutated_replies_raise_only_codec_errors(value: bytes) -> None:
    with contextlib.suppress(*CODEC_ERRORS):
        decode_reply(value)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=10)


@PROPERTY
@given(st.dictionaries(st.sampled_from(["v", "command", "register_feed", "ok", "result", "error", "x"]), JSON_VALUES))
def test_random_json_envelopes_raise_only_codec_errors(envelope: dict[str, object]) -> None:
    data = json.dumps(envelope).encode()
    with contextlib.suppress(*CODEC_ERRORS, InvalidArgumentError):
        decode_command(data)
    with contextlib.suppress(*CODEC_ERRORS):
        decode_reply(data)


@PROPERTY
@given(st.data())
def test_readable_avro_records_with_any_values_raise_only_codec_errors(data: st.DataObject) -> None:
    # Well-formed Avro whose values break the fold's rules (a caller that is no address, a short
    # digest, reply_json that is not JSON, a config that breaks CIP-7) is a malformed record too.
    name = data.draw(st.sampled_from(sorted(EVENT_SCHEMAS)))
    record = data.draw(records_for(codec.avro_schema(name)))
    with contextlib.suppress(*CODEC_ERRORS):
        decode_event(codec.encode(name, record))
