"""Hypothesis strategies and shared fixtures data for the protocol tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nacl.signing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from watchtower.protocol import PayloadFormat, StreamMessage, sign_message

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VECTORS_FILE = SHARED / "vectors" / "conformance-v1.json"

# Modest example counts keep the whole protocol suite well under a minute; no deadline because
# CI machines share cores with brokers and Spark.
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(1, 4)]


def vectors_of_type(vector_type: str) -> list[dict[str, Any]]:
    """The shared conformance vectors of one type."""
    document = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
    return [v for v in document["vectors"] if v["type"] == vector_type]


text = st.text(min_size=1, max_size=12)
uint = st.integers(min_value=0, max_value=2**63 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
tag_values = st.one_of(st.text(max_size=10), st.booleans(), finite_floats, st.integers(-(2**53), 2**53))
tags = st.dictionaries(st.text(min_size=1, max_size=8), tag_values, max_size=5)


@st.composite
def signed_messages(draw: st.DrawFn) -> tuple[StreamMessage, nacl.signing.SigningKey]:
    """A valid signed message and the key that signed it."""
    key = draw(st.sampled_from(KEYS))
    ciphertext = draw(st.booleans())
    payload = draw(st.binary(min_size=40 if ciphertext else 0, max_size=300))
    msg = sign_message(
        stream_id=draw(text),
        sequence=draw(st.integers(min_value=1, max_value=2**63 - 1)),
        timestamp_unix_ms=draw(uint),
        kind=draw(text),
        content_type=draw(st.none() | text),
        tags=draw(tags),
        payload_format=PayloadFormat.CIPHERTEXT if ciphertext else PayloadFormat.PLAINTEXT,
        key_epoch=draw(uint) if ciphertext else None,
        signing_key_id=draw(st.integers(min_value=1, max_value=2**63 - 1)),
        payload=payload,
        signing_key=key,
    )
    return msg, key


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)
