"""The ``replay`` topic's bytes: the JSON of `watchtower.protocol.replay.records`, derived from
those definitions by msgspec (like `keymgr_records`); any Kafka client reads them, Spark with
``from_json``. Every record of one replay is keyed by the replay's ``stream_id`` (UTF-8), so it
lands on the stream's partition: partition *p* of ``replay`` holds the replays of the streams whose
messages are on partition *p* of ``messages``, and one owner folds a replay's whole life in order.

Decoding raises MalformedRecordError (not one of these records) or SchemaMismatchError (a version
this build does not read), so a hostile record is quarantined, never a crash.
"""

from __future__ import annotations

from typing import Final

import msgspec

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.replay.records import REPLAY_RECORD_VERSION, ReplayRecord

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(ReplayRecord)


def encode_replay_record(record: ReplayRecord) -> bytes:
    """The JSON bytes of a replay record (``kind`` names its type)."""
    return _ENCODER.encode(record)


def decode_replay_record(data: bytes | None) -> ReplayRecord:
    """The replay record in `data`; MalformedRecordError / SchemaMismatchError otherwise."""
    if data is None:
        raise MalformedRecordError("the replay record has no value")
    try:
        record = _DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedRecordError(f"not a replay record: {' '.join(str(exc).split())[:200]}") from None
    version = record.v
    if version != REPLAY_RECORD_VERSION or isinstance(version, bool):
        raise SchemaMismatchError(f"the replay record version {version!r} is not supported (this build reads "
                                  f"v{REPLAY_RECORD_VERSION}); upgrade the replay worker")
    if record.stream_id == "" or type(record.replay_id) is not int or record.replay_id < 1:
        raise MalformedRecordError("a replay record needs a stream_id and a positive replay_id")
    return record
