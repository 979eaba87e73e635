"""Read the committed StreamMessages straight from the messages topic: what the demo and the tests
compare the API's answers with."""

from __future__ import annotations

from watchtower.protocol.stream.message import StreamMessage
from watchtower.schemas.records import decode_message
from watchtower.topics.catalogue import topic_name
from watchtower.topics.reader import read_committed


def read_committed_messages(bootstrap: str, *, prefix: str | None = None,
                            stream_id: str | None = None) -> list[StreamMessage]:
    """Every committed StreamMessage (of ``stream_id``, if given), in log order per partition.

    Reads ``read_committed`` from offset 0 to the end of every partition, so messages of
    aborted transactions never appear. Meant for verification and tools, not the hot path.
    """
    key = None if stream_id is None else stream_id.encode()
    return [decode_message(m.value() or b"") for m in read_committed(bootstrap, [topic_name("messages", prefix)])
            if key is None or m.key() == key]
