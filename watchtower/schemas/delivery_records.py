"""The records of the ``delivery-state`` topic (``<prefix>.delivery.state``): push checkpoints.

One JSON record per stream (keyed by the stream id, UTF-8, on the stream's partition: the topic is
co-partitioned with ``events`` and ``messages``), compacted so the latest checkpoint of each stream
survives. The fields are `watchtower.protocol.push.checkpoint.PushCheckpoint.to_dict` (docs/push.md).
The delivery worker writes them in the transaction that writes the deliveries they account for.

Decoding raises MalformedRecordError (not a checkpoint) or SchemaMismatchError (a version this build
does not read), so a hostile record is quarantined, never a crash.
"""

from __future__ import annotations

import json

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError, WatchtowerError
from watchtower.protocol.push.checkpoint import CHECKPOINT_VERSION, PushCheckpoint


def encode_checkpoint(checkpoint: PushCheckpoint) -> bytes:
    return json.dumps(checkpoint.to_dict(), separators=(",", ":"), sort_keys=True).encode()


def decode_checkpoint(data: bytes | None) -> PushCheckpoint:
    """The checkpoint in a ``delivery-state`` record (MalformedRecordError / SchemaMismatchError)."""
    if data is None:
        raise MalformedRecordError("the delivery-state record has no value (a tombstone is not a checkpoint)")
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedRecordError(f"the delivery-state record is not JSON: {str(exc)[:120]}") from None
    if isinstance(parsed, dict) and "v" in parsed and parsed["v"] != CHECKPOINT_VERSION:
        raise SchemaMismatchError(f"push checkpoint version {parsed['v']!r}; this build reads {CHECKPOINT_VERSION}")
    try:
        return PushCheckpoint.from_dict(parsed)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"not a push checkpoint ({exc.code}): {exc.message}") from None
