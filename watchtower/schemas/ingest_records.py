"""The wire form of ingestion's signed records: framed Avro ``IngestTask`` / ``IngestResult``
(``watchtower/schemas/Ingest*.v1.avsc``), field for field with `protocol.ingestion_records`."""

from __future__ import annotations

import dataclasses
from typing import Any

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.ingestion_records import IngestResult, IngestTask
from watchtower.schemas import codec


def encode_task(task: IngestTask) -> bytes:
    record: dict[str, Any] = dataclasses.asdict(task)
    record["runners"] = list(task.runners)
    return codec.encode("IngestTask", record)


def decode_task(data: bytes | None) -> IngestTask:
    """The task in `data`; MALFORMED_RECORD / SCHEMA_MISMATCH for anything else (quarantine it)."""
    record = _decode("IngestTask", data)
    record["runners"] = tuple(record["runners"])
    return IngestTask(**record)


def encode_result(result: IngestResult) -> bytes:
    return codec.encode("IngestResult", dataclasses.asdict(result))


def decode_result(data: bytes | None) -> IngestResult:
    """The result in `data`; MALFORMED_RECORD / SCHEMA_MISMATCH for anything else (quarantine it)."""
    return IngestResult(**_decode("IngestResult", data))


def _decode(name: str, data: bytes | None) -> dict[str, Any]:
    if not isinstance(data, bytes):
        raise MalformedRecordError(f"an {name} record has a value")
    try:
        return dict(codec.decode_as(name, data))
    except (MalformedRecordError, SchemaMismatchError):
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise MalformedRecordError(f"not an {name} record ({type(exc).__name__})") from None
