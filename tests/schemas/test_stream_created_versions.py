"""StreamCreated v3 carries config.confidential; v1 and v2 records still decode, as not confidential."""

from __future__ import annotations

from typing import Any

from wire_samples import confidential_stream, open_stream

from watchtower.protocol.events import StreamCreated
from watchtower.protocol.stream.state import STREAM_CREATED, Event, StreamState, evolve
from watchtower.schemas import codec, events, wire


def _created(stream_events: list[Event]) -> Event:
    return next(e for e in stream_events if e.type == STREAM_CREATED)


def _old_record(event: Event, version: int) -> dict[str, Any]:
    record = events.event_record(event)
    del record["config"]["confidential"]
    if version == 1:
        del record["command"]
    return record


def test_a_v3_record_carries_confidential_and_decodes_to_it() -> None:
    event = _created([e for _, d in confidential_stream().decided for e in d.events])
    data = wire.encode_event(event)
    assert codec.read_header(data) == ("StreamCreated", 3)
    decoded = wire.decode_event(data)
    assert isinstance(decoded.body, StreamCreated)
    assert decoded.body.config.confidential is True
    state = evolve(StreamState.initial(event.stream_id), decoded)
    assert state.config is not None
    assert state.config.confidential


def test_v2_and_v1_records_decode_as_not_confidential() -> None:
    event = _created([e for _, d in open_stream().decided for e in d.events])
    for version in (1, 2):
        data = codec.encode("StreamCreated", _old_record(event, version), version=version)
        assert codec.read_header(data) == ("StreamCreated", version)
        decoded = codec.decode(data)
        assert decoded.version == version
        assert decoded.record["config"]["confidential"] is False
    # A v2 record folds (v1 carries no signed command, which the fold refuses for its own reason).
    v2 = wire.decode_event(codec.encode("StreamCreated", _old_record(event, 2), version=2))
    state = evolve(StreamState.initial(event.stream_id), v2)
    assert state.config is not None
    assert state.config.confidential is False


def test_a_stream_that_is_not_confidential_keeps_its_config_dict() -> None:
    event = _created([e for _, d in open_stream().decided for e in d.events])
    decoded = wire.decode_event(wire.encode_event(event))
    assert isinstance(event.body, StreamCreated)
    assert isinstance(decoded.body, StreamCreated)
    assert "confidential" not in event.body.config.to_dict()
    assert "confidential" not in decoded.body.config.to_dict()
