"""Rebuilding from the events topic never misses a committed batch (real broker).

Right after a transaction commits, and until the coordinator has written its markers, the last
stable offset still stops before the batch; a read_committed scan started then would end before
it while the batch's consumed offsets are already committed, and the worker would decide the next
commands against a stale head. The loader must wait for open transactions to end.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor, wait

import nacl.signing
import pytest
from confluent_kafka import Producer
from worker_harness import partition_for, workers

from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import StreamState, decide
from watchtower.schemas.wire import encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.workers.state_loader import load_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 3


def test_a_batch_committed_while_the_rebuild_starts_is_in_the_rebuild(kafka_bootstrap: str) -> None:
    owner = nacl.signing.SigningKey.generate()
    with workers(kafka_bootstrap, partitions=PARTITIONS) as w:
        events = topic_name("events", w.prefix)
        sid = f"loader.{w.prefix}"
        partition = partition_for(sid, PARTITIONS)
        cmd = sign_command(owner, "create_stream", sid, 1, {"publisher_key_hex": bytes(owner.verify_key).hex()})
        (created,) = decide(StreamState.initial(sid), cmd, block_height=1).events

        producer = Producer({**kafka_config(kafka_bootstrap), "transactional.id": f"loader-{uuid.uuid4().hex}",
                             "log_level": 3})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(events, key=sid.encode(), value=encode_event(created), partition=partition)
        producer.flush(30)  # written, but its transaction is still open

        with ThreadPoolExecutor(1) as pool:
            rebuild = pool.submit(load_partitions, kafka_bootstrap, events, [partition], PARTITIONS, timeout_s=60)
            # Give a loader that does not wait for open transactions the time to finish first.
            wait([rebuild], timeout=3)
            producer.commit_transaction(30)
            states = rebuild.result(timeout=60)

        assert sid in states[partition].streams, "the rebuild ended before the committed batch"
        assert states[partition].streams[sid].created
        assert states[partition].quarantined == []
