"""A deterministic stream for the Spark job tests, published through a real stack's API.

Messages 1..LENGTH, kind trade/quote, tag ``symbol`` BTC on every third message, the publisher key
rotated after ROTATED_AFTER (key id 1, then 2).
"""

from __future__ import annotations

import json
from typing import Any

import nacl.signing

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.message import StreamMessage
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message

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
    """Create `stream_id` and publish 1..length through `api` (each command answered = committed)."""
    nonce = iter(range(1, 100_000))
    api.command(sign_command(OWNER, "create_stream", stream_id, next(nonce), {
        "publisher_key_hex": bytes(KEY_1.verify_key).hex(), "ring_buffer_capacity": 10}))
    for seq in range(1, length + 1):
        if seq == ROTATED_AFTER + 1:
            api.command(sign_command(OWNER, "rotate_publisher_key", stream_id, next(nonce),
                                     {"new_key": bytes(KEY_2.verify_key)}))
        api.command(sign_command(OWNER, "publish", stream_id, next(nonce), message(stream_id, seq).to_json_dict()))
