"""Each input that once crashed a decoder, as a named regression test of the fixed behaviour.

The raw inputs also live in ``fuzz/crashes/<decoder>/`` and are replayed by
`test_decoder_contracts`; these tests state what the decoder must answer instead.
"""

from __future__ import annotations

import json

import pytest

from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.message import StreamMessage


@pytest.mark.parametrize("document", ["null", '"x"', '[["a"]]', "1e400", "[]"])
def test_a_message_that_is_not_a_json_object_is_invalid_argument(document: str) -> None:
    # Was: TypeError / ValueError from dict(data), a crash of the publish path's decoder.
    with pytest.raises(InvalidArgumentError, match="must be a JSON object"):
        StreamMessage.from_json_dict(json.loads(document))
