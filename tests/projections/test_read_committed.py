"""The projection folds only committed records, live and when a worker folds a partition from the log.

Its consumer is at-least-once (no Faust transactions), so reading ``read_committed`` is what keeps
aborted writes out. A copy of a real StreamCreated event for a new stream is written to the
events topic in a transaction that is aborted, and another copy in one that commits. The live
worker and a worker of a new generation (which folds every partition from the log when assigned)
must both know the committed stream and answer STREAM_NOT_FOUND for the aborted one.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from confluent_kafka import Producer
from kafka_fixture import free_ports
from stack_fixture import start_stack

from watchtower.protocol.events import StreamCreated
from watchtower.protocol.signed_command import Command, command_digest, sign_command
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.state import STREAM_CREATED, Event
from watchtower.schemas.wire import decode_event, encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed

pytestmark = pytest.mark.integration


def _created_event(bootstrap: str, events: str, stream_id: str) -> Event:
    for m in read_committed(bootstrap, [events]):
        if m.key() == stream_id.encode() and decode_event(m.value()).type == STREAM_CREATED:
            return decode_event(m.value())
    raise AssertionError(f"no StreamCreated for {stream_id}")


def _write_copy(bootstrap: str, events: str, created: Event, stream_id: str, owner: nacl.signing.SigningKey,
                *, commit: bool) -> None:
    body = created.body
    assert isinstance(body, StreamCreated)
    assert body.command is not None
    # The config names the stream, else the fold quarantines it as forged; likewise the owner's
    # signed create command, which names the stream it creates (key chain).
    original = Command.from_dict(json.loads(body.command))
    resigned = sign_command(owner, "create_stream", stream_id, original.nonce, dict(original.body))
    copy = dataclasses.replace(
        created, stream_id=stream_id, digest=command_digest(resigned),
        body=StreamCreated(config=dataclasses.replace(body.config, stream_id=stream_id),
                           command=command_json(resigned)))
    value = encode_event(copy)
    assert decode_event(value).stream_id == stream_id  # a well-formed event: only the abort may hide it
    producer = Producer({**kafka_config(bootstrap), "transactional.id": f"test-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(events, key=stream_id.encode(), value=value, partition=partition_for_key(stream_id.encode(), 3))
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _status(api: str, stream_id: str) -> int:
    return http("GET", f"{api}/v1/streams/{stream_id}")[0]


def test_aborted_events_are_never_projected_live_or_when_folding_a_partition_from_the_log(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with start_stack(kafka_bootstrap, tmp_path, partitions=3) as stack:
        original = f"s-{uuid.uuid4().hex[:10]}"
        key = nacl.signing.SigningKey.generate()
        owner = Caller(stack.api_url)
        owner.ok("create_stream", original, {"publisher_key_hex": bytes(key.verify_key).hex()})
        events = topic_name("events", stack.prefix)
        wire = _created_event(stack.bootstrap, events, original)
        aborted, committed = f"s-aborted-{uuid.uuid4().hex[:8]}", f"s-committed-{uuid.uuid4().hex[:8]}"
        _write_copy(stack.bootstrap, events, wire, aborted, owner.key, commit=False)
        _write_copy(stack.bootstrap, events, wire, committed, owner.key, commit=True)

        wait_for(lambda: _status(stack.api_url, committed) == 200, what="the committed copy to be projected")
        assert _status(stack.api_url, aborted) == 404

        port = free_ports(1)[0]
        stack.start_projection("fresh", port=port, generation=2)
        fresh = f"http://127.0.0.1:{port}"
        stack.wait_ready(api_url=fresh)
        assert _status(fresh, committed) == 200
        assert _status(fresh, aborted) == 404
