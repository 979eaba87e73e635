"""Fixtures shared by the codec tests."""

from __future__ import annotations

import pytest

from watchtower.protocol import stream_state
from watchtower.protocol.stream_state import MESSAGE_CIP7_FIELDS


@pytest.fixture
def reference_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """StreamMessagePublished's body is exactly the ten CIP-7 reference fields: the shape every
    package uses once the message lives only on the messages topic (a no-op from then on)."""
    fields = stream_state.EVENT_BODY_FIELDS
    monkeypatch.setitem(fields, "StreamMessagePublished", frozenset(MESSAGE_CIP7_FIELDS))  # type: ignore[index]
