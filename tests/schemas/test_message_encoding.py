"""The messages-topic record is written without the checked encoder's field walk (`encode_message`):
the bytes must be exactly those the checked encoder writes, and decode back to the same message."""

from __future__ import annotations

import nacl.signing
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.protocol.signing import sign_message
from watchtower.schemas import codec
from watchtower.schemas.records import decode_message, encode_message

KEY = nacl.signing.SigningKey(b"\x05" * 32)
tags = st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=8),
                       st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=20), st.booleans()), max_size=4)


@settings(max_examples=60, deadline=None)
@given(sequence=st.integers(1, 2**62), timestamp=st.integers(0, 2**62), kind=st.text(alphabet="abcxyz._-", min_size=1,
       max_size=40), payload=st.binary(max_size=2048), tags=tags, key_id=st.integers(1, 2**31))
def test_the_written_record_is_the_checked_encoders_bytes(sequence: int, timestamp: int, kind: str, payload: bytes,
                                                          tags: dict[str, object], key_id: int) -> None:
    message = sign_message(stream_id="stream-1", sequence=sequence, timestamp_unix_ms=timestamp, kind=kind,
                           payload=payload, signing_key=KEY, signing_key_id=key_id, tags=tags)
    written = encode_message(message)
    assert written == codec.encode("StreamMessage", message.to_record())
    assert decode_message(written) == message


@settings(max_examples=60, deadline=None)
@given(sequence=st.integers(1, 2**62), timestamp=st.integers(0, 2**62), payload=st.binary(max_size=2048), tags=tags)
def test_a_record_read_back_is_served_exactly_as_its_checked_message(sequence: int, timestamp: int, payload: bytes,
                                                                     tags: dict[str, object]) -> None:
    """The read path serves a verified record from its Avro record (`json_dict_of_record`), not from a
    rebuilt StreamMessage: its JSON and its filter headers must be the checked message's."""
    from watchtower.protocol.stream.message import headers_of_record, json_dict_of_record
    from watchtower.schemas.records import decode_message_record

    message = sign_message(stream_id="stream-1", sequence=sequence, timestamp_unix_ms=timestamp, kind="price",
                           payload=payload, signing_key=KEY, tags=tags)
    record = decode_message_record(encode_message(message))
    assert json_dict_of_record(record) == message.to_json_dict()
    assert headers_of_record(record) == message.headers()
