"""The AAD is assembled by concatenation; it must stay exactly deterministic CBOR of its five fields."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchtower.protocol import cbor
from watchtower.protocol.confidential.envelope import envelope_aad, parse_envelope_aad
from watchtower.protocol.errors import InvalidArgumentError

TEXT = st.text(min_size=1, max_size=40)
U64 = st.integers(0, 2**64 - 1)


@settings(max_examples=300, deadline=None)
@given(stream_id=TEXT, sequence=U64, key_epoch=U64, kind=TEXT, content_type=TEXT)
def test_the_aad_is_the_general_encoders_bytes_and_decodes_to_its_fields(
        stream_id: str, sequence: int, key_epoch: int, kind: str, content_type: str) -> None:
    fields = {"stream_id": stream_id, "sequence": sequence, "key_epoch": key_epoch, "kind": kind,
              "content_type": content_type}
    aad = envelope_aad(**fields)
    assert aad == cbor.encode(fields)
    assert cbor2.loads(aad) == fields  # an independent decoder agrees


def test_a_known_aad_keeps_its_bytes() -> None:
    aad = envelope_aad(stream_id="s", sequence=1, key_epoch=2, kind="k", content_type="t")
    assert aad.hex() == ("a5" "646b696e64" "616b" "6873657175656e6365" "01" "696b65795f65706f6368" "02"
                         "6973747265616d5f6964" "6173" "6c636f6e74656e745f74797065" "6174")


@pytest.mark.parametrize("bad", [{"sequence": -1}, {"key_epoch": 2**64}, {"kind": 3}, {"stream_id": ""},
                                 {"sequence": True}])
def test_fields_outside_their_types_are_refused(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"stream_id": "s", "sequence": 1, "key_epoch": 2, "kind": "k", "content_type": "t"}
    with pytest.raises(InvalidArgumentError):
        envelope_aad(**{**fields, **bad})  # type: ignore[arg-type]


def test_parse_gives_back_the_fields_of_an_aad() -> None:
    fields = {"stream_id": "s", "sequence": 9, "key_epoch": 2, "kind": "k", "content_type": "t"}
    assert parse_envelope_aad(envelope_aad(**fields)) == fields


@pytest.mark.parametrize("aad", [
    b"", b"\xff", b"\x9f" * 5000, b"not cbor", cbor2.dumps([1, 2]),
    cbor2.dumps({"stream_id": "s", "key_epoch": 2}),  # not all five fields
    cbor2.dumps({"stream_id": "s", "sequence": 1, "key_epoch": 2, "kind": "k", "content_type": "t", "x": 1}),
    # the same five fields in Python's key order, not deterministic CBOR's
    cbor2.dumps({"stream_id": "s", "sequence": 1, "key_epoch": 2, "kind": "k", "content_type": "t"}),
    cbor2.dumps({"stream_id": "s", "sequence": -1, "key_epoch": 2, "kind": "k", "content_type": "t"},
                canonical=True),
])
def test_anything_but_an_exact_aad_is_refused(aad: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_envelope_aad(aad)
