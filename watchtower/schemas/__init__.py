"""Avro schemas for every Watchtower command, event and record, and the framed codec.

- ``<Name>.v<N>.avsc`` — one file per schema version (namespace ``watchtower.v<N>``);
- `catalog` — stable schema ids and kinds;
- `codec` — framed encode/decode, `SCHEMA_MISMATCH` / `MALFORMED_RECORD`, upcasting;
- `records` — StreamMessage and StreamConfig ↔ Avro records;
- `commands` — signed command envelopes.

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
