"""Every record on every Watchtower topic, defined once: Avro events and StreamMessages, JSON envelopes.

- ``<Name>.v<N>.avsc`` — one file per schema version (namespace ``watchtower.v<N>``);
- `catalog` — stable schema ids and kinds;
- `codec` — framed encode/decode, `SCHEMA_MISMATCH` / `MALFORMED_RECORD`, upcasting;
- `records` — StreamMessage and StreamConfig ↔ Avro records;
- `events` — one typed frozen class per event type and version;
- `envelopes` — the JSON command, forward and reply envelopes;
- `wire` — the codec of every topic's records.

No I/O beyond reading the package's own schema files.
"""

from watchtower.schemas.codec import (
    HEADER_BYTES,
    MAGIC,
    Decoded,
    avro_schema,
    decode,
    decode_as,
    encode,
    latest_version,
    read_header,
    register_upcaster,
)

__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "Decoded",
    "avro_schema",
    "decode",
    "decode_as",
    "encode",
    "latest_version",
    "read_header",
    "register_upcaster",
]
