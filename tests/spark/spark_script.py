"""A deterministic stream for the Spark job tests, published through a real stack's API.

Messages 1..LENGTH, kind trade/quote, tag ``symbol`` BTC on every third message, the publisher key
rotated after ROTATED_AFTER (key id 1, then 2).
"""

from __future__ import annotations

import json
from typing import Any

import nacl.signing

from watchtower.client.sdk import wait_until_visible
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.replay.records import ReplayRegistration
from watchtower.protocol.replay.rules import canonical_filter, parse_replay_filter, read_replay_headers, replay_id_for
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.replay_records import encode_replay_record
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key
from watchtower.topics.reader import read_committed

OWNER = nacl.signing.SigningKey(bytes(range(60, 92)))
KEY_1 = nacl.signing.SigningKey(bytes(range(61, 93)))
KEY_2 = nacl.signing.SigningKey(bytes(range(62, 94)))
READER_KEY = nacl.signing.SigningKey(bytes(range(63, 95)))
READER = address_from_public_key(bytes(READER_KEY.verify_key))
ROTATED_AFTER = 12
LENGTH = 30
BTC = {"field": "tags.symbol", "op": "eq", "value": "BTC"}


def message(stream_id: str, seq: int) -> StreamMessage:
    key, key_id = (KEY_1, 1) if seq <= ROTATED_AFTER else (KEY_2, 2)
    return sign_message(stream_id=stream_id, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq * 3_600_000,
                        kind="trade" if seq % 2 else "quote", payload=json.dumps({"px": seq}).encode(),
                        signing_key=key, signing_key_id=key_id,
                        tags={"symbol": "BTC" if seq % 3 == 0 else "ETH", "size": seq % 7})


def publish_script(api: Any, stream_id: str, length: int = LENGTH) -> None:
    """Create `stream_id` and publish 1..length through `api` (each command answered = committed),
    then wait until the read side shows all of it: a key schedule or page read right after the
    last acknowledgement could otherwise find the stream not projected yet."""
    nonce = iter(range(1, 100_000))
    api.command(sign_command(OWNER, "create_stream", stream_id, next(nonce), {
        "publisher_key_hex": bytes(KEY_1.verify_key).hex(), "ring_buffer_capacity": 10}))
    for seq in range(1, length + 1):
        if seq == ROTATED_AFTER + 1:
            api.command(sign_command(OWNER, "rotate_publisher_key", stream_id, next(nonce),
                                     {"new_key": bytes(KEY_2.verify_key)}))
        api.command(sign_command(OWNER, "publish", stream_id, next(nonce), message(stream_id, seq).to_json_dict()))
    wait_until_visible(api, stream_id, min_head=length, signing_key_id=2 if length > ROTATED_AFTER else 1,
                       timeout_s=60)


def register_replay(bootstrap: str, prefix: str, stream_id: str, nonce: int, *, first: int, end_exclusive: int,
                    end_id: int | None, filter_spec: Any = None, skip: list[int] | None = None) -> tuple[int, int]:
    """Write the ``registered`` record the stream's writer would write for READER's signed
    register_replay (nonce `nonce`) of `stream_id` (3 partitions); (its replay id, the replay partition)."""
    from confluent_kafka import Producer

    partition = partition_for_key(stream_id.encode(), 3)
    to = None if end_id is not None else end_exclusive
    config = {name: value for name, value in (("filter", filter_spec), ("skip", skip)) if value is not None}
    body: dict[str, Any] = {"namespace": stream_id, "from": first, **({} if to is None else {"to": to}),
                            **({"config": config} if config else {})}
    cmd = sign_command(READER_KEY, "register_replay", stream_id, nonce, body)
    digest = command_digest(cmd)
    replay_id = replay_id_for(digest)
    record = ReplayRegistration(
        v=1, replay_id=replay_id, stream_id=stream_id, namespace=stream_id, requester=READER, from_sequence=first,
        to_sequence=to, first=first, end_exclusive=end_exclusive, end_id=end_id,
        filter=canonical_filter(parse_replay_filter(filter_spec)), skip=skip, memo_hex="", price_cby=0,
        block_height=1, caller=READER, nonce=nonce, digest_hex=digest.hex(), command=cmd.to_dict())
    producer = Producer(kafka_config(bootstrap))
    producer.produce(topic_name("replay", prefix), key=stream_id.encode(), value=encode_replay_record(record),
                     partition=partition)
    assert producer.flush(60) == 0
    return replay_id, partition


def replay_deliveries(bootstrap: str, prefix: str, replay_id: int) -> list[Any]:
    """The records on ``deliveries`` that carry replay `replay_id`'s headers, in log order."""
    out = []
    for m in read_committed(bootstrap, [topic_name("deliveries", prefix)]):
        marker = read_replay_headers(m.headers())
        if marker is not None and marker.replay_id == replay_id:
            out.append(m)
    return out
