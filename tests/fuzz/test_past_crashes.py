"""Each input that once crashed a decoder, as a named regression test of the fixed behaviour.

The raw inputs also live in ``fuzz/crashes/<decoder>/`` and are replayed by
`test_decoder_contracts`; these tests state what the decoder must answer instead.
"""

from __future__ import annotations

import json

import cbor2
import pytest

from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.snapshot_cbor import SnapshotError
from watchtower.protocol.stream.snapshots import decode_streams


@pytest.mark.parametrize("document", ["null", '"x"', '[["a"]]', "1e400", "[]"])
def test_a_message_that_is_not_a_json_object_is_invalid_argument(document: str) -> None:
    # Was: TypeError / ValueError from dict(data), a crash of the publish path's decoder.
    with pytest.raises(InvalidArgumentError, match="must be a JSON object"):
        StreamMessage.from_json_dict(json.loads(document))


def _streams_part(stream: dict[str, object]) -> bytes:
    base: dict[str, object] = {"stream_id": "s", "created": False, "owner": None, "config": None, "head": 0,
                               "keys": None, "subs": [], "allowlist": [], "last_key_epoch": None, "callers": [],
                               "last_publish_digest": None}
    return cbor2.dumps({"v": 1, "streams": [{**base, **stream}]}, canonical=True)


@pytest.mark.parametrize(("field", "value"), [
    ("subs", ["0224"]),  # a short text where a subscription row belongs: was IndexError
    ("callers", ["x"]),  # was IndexError
    ("callers", [["0x" + "ab" * 32, 1, 2**40, {}]]),  # a number where bytes belong: was MemoryError (bytes(n))
    ("keys", [[1, 2**40, 1]]),  # the same through the key schedule
    ("keys", [[1, b"k"]]),  # a short key row
    ("subs", {"a": 1}),  # a map where the rows belong
    ("subs", [[b"addr", "PULL", "ACTIVE", 1, 1, None, None]]),  # a subscriber that is bytes: was AttributeError
    ("callers", [[7, 1, b"d" * 32, {}]]),  # a caller that is a number: was AttributeError
])
def test_a_snapshot_stream_with_a_malformed_row_is_a_snapshot_error(field: str, value: object) -> None:
    with pytest.raises(SnapshotError):
        decode_streams(_streams_part({field: value}))
