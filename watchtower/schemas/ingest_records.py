"""The wire form of ingestion's signed records: framed Avro ``IngestTask`` / ``IngestResult``
(``watchtower/schemas/Ingest*.v1.avsc``), field for field with `protocol.ingestion.records`, and
their batches (``IngestTaskBatch`` / ``IngestResultBatch``: a signed Avro array of them).

A record on ``ingest.tasks`` or ``ingest.results`` is either kind: `decode_tasks` and
`decode_results` read both, and say which signer a batch names so the caller verifies it
(`protocol.ingestion.records.verify_task_batch` / `verify_result_batch`) before `batch_entries`
decodes its body.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Sequence
from typing import Any, Final

import fastavro
import nacl.signing

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.protocol.ingestion.records import (
    MAX_BATCH,
    RESULT_BATCH_DOMAIN,
    TASK_BATCH_DOMAIN,
    IngestResult,
    IngestTask,
    SignedBatch,
    sign_batch,
)
from watchtower.schemas import codec

TASK_BATCH: Final = "IngestTaskBatch"
RESULT_BATCH: Final = "IngestResultBatch"
_SIGNER_FIELD: Final = {TASK_BATCH: "scheduler", RESULT_BATCH: "runner"}
_BODY_FIELD: Final = {TASK_BATCH: "tasks", RESULT_BATCH: "results"}


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


# --- batches -------------------------------------------------------------------------------------

@functools.cache
def _array_schema(item: str) -> Any:
    return fastavro.parse_schema({"type": "array", "items": codec.avro_schema(item, 1)})


def _entry_record(entry: IngestTask | IngestResult) -> dict[str, Any]:
    record = {name: getattr(entry, name) for name in entry.__slots__}
    if isinstance(entry, IngestTask):
        record["runners"] = list(entry.runners)
    record["signature"] = b""
    return record


def _body(item: str, entries: Sequence[IngestTask | IngestResult]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _array_schema(item), [_entry_record(e) for e in entries])
    return out.getvalue()


def encode_task_batch(tasks: Sequence[IngestTask], key: nacl.signing.SigningKey) -> bytes:
    """One ``IngestTaskBatch`` record of `tasks` (at most `MAX_BATCH`), signed by the scheduler `key`."""
    return _encode_batch(TASK_BATCH, sign_batch(TASK_BATCH_DOMAIN, _body("IngestTask", tasks), key), len(tasks))


def encode_result_batch(results: Sequence[IngestResult], key: nacl.signing.SigningKey) -> bytes:
    """One ``IngestResultBatch`` record of `results` (at most `MAX_BATCH`), signed by the runner `key`."""
    return _encode_batch(RESULT_BATCH, sign_batch(RESULT_BATCH_DOMAIN, _body("IngestResult", results), key),
                         len(results))


def _encode_batch(name: str, batch: SignedBatch, n: int) -> bytes:
    if not 1 <= n <= MAX_BATCH:
        raise ValueError(f"a batch holds 1..{MAX_BATCH} entries, got {n}")
    return codec.encode(name, {_SIGNER_FIELD[name]: batch.signer, _BODY_FIELD[name]: batch.body,
                               "signature": batch.signature})


def decode_tasks(data: bytes | None) -> IngestTask | SignedBatch:
    """An ``ingest.tasks`` record: a single task, or a task batch still to verify
    (`verify_task_batch`) and then open (`batch_tasks`). MALFORMED_RECORD / SCHEMA_MISMATCH for
    anything else (quarantine it)."""
    return _decode_either("IngestTask", TASK_BATCH, data, decode_task)


def decode_results(data: bytes | None) -> IngestResult | SignedBatch:
    """An ``ingest.results`` record: a single result, or a result batch still to verify
    (`verify_result_batch`) and then open (`batch_results`)."""
    return _decode_either("IngestResult", RESULT_BATCH, data, decode_result)


def _decode_either(single: str, batch: str, data: bytes | None, one: Any) -> Any:
    if not isinstance(data, bytes):
        raise MalformedRecordError(f"an {single} record has a value")
    name, _ = codec.read_header(data)
    if name != batch:
        return one(data)
    record = _decode(batch, data)
    if len(record["signature"]) != 64:
        raise MalformedRecordError(f"an {batch}'s signature is 64 bytes")
    return SignedBatch(record[_SIGNER_FIELD[batch]], record[_BODY_FIELD[batch]], record["signature"])


def batch_tasks(batch: SignedBatch) -> list[IngestTask]:
    """The tasks of a verified task batch (MALFORMED_RECORD when its body is not 1..MAX_BATCH tasks)."""
    return [IngestTask(**{**r, "runners": tuple(r["runners"])}) for r in _entries("IngestTask", batch.body)]


def batch_results(batch: SignedBatch) -> list[IngestResult]:
    """The results of a verified result batch (MALFORMED_RECORD when its body is not 1..MAX_BATCH results)."""
    return [IngestResult(**r) for r in _entries("IngestResult", batch.body)]


def _entries(item: str, body: bytes) -> list[dict[str, Any]]:
    stream = io.BytesIO(body)
    try:
        records = fastavro.schemaless_reader(stream, _array_schema(item))
    except Exception as exc:  # EOFError, UnicodeDecodeError, IndexError, MemoryError, ...
        raise MalformedRecordError(f"a batch's body is not an array of {item} ({type(exc).__name__})") from None
    if stream.tell() != len(body) or not isinstance(records, list) or not 1 <= len(records) <= MAX_BATCH:
        raise MalformedRecordError(f"a batch's body is an array of 1..{MAX_BATCH} {item} records and nothing else")
    return records
