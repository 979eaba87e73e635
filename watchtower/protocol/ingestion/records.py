"""The two signed records of ingestion: a task (one tick of one stream, on ``ingest.tasks``,
signed by the scheduler) and a runner's result (on ``ingest.results``, signed by the runner).

Each is signed over the deterministic CBOR of its fields (without the signature) under its own
domain, so a task signature can never pass as a result's or a command's. Both topics are treated
as hostile: `verify_task` and `check_result` say exactly why a record is refused, and the caller
quarantines it (counted, never published).

A task record with ``skip_from`` set is the scheduler's catch-up notice (`ingestion.due_ticks`):
ticks ``skip_from..tick`` were not run; it selects no runner.

Batches. A scheduler issues a block's tasks, and a runner its results of a few milliseconds, as
batch records (`SignedBatch`): the batch's Avro body (an array of tasks or of results, each with an
empty signature) is signed once, as bytes, under its own domain. A reader verifies that one
signature before it decodes the body, then checks every entry as it checks a single record, minus
the entry's own signature (``batch_verified``). One signature per batch instead of one per tick is
what lets a deployment of hundreds of feeds ticking every block keep up; single records stay valid.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Final

import nacl.exceptions
import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key, public_key_from_address
from watchtower.protocol.errors import InvalidSignatureError, MalformedRecordError, UnauthorizedError
from watchtower.protocol.frozen_json import to_tagged_json
from watchtower.protocol.ingestion import IngestReason, ProofType, task_id
from watchtower.protocol.ingestion.proof import select_runners

TASK_DOMAIN: Final = "watchtower-ingest-task-v1"
RESULT_DOMAIN: Final = "watchtower-ingest-result-v1"
TASK_BATCH_DOMAIN: Final = b"watchtower-ingest-task-batch-v1\x00"
RESULT_BATCH_DOMAIN: Final = b"watchtower-ingest-result-batch-v1\x00"
"""Prefixes of the bytes a batch signature covers. They start with ``w`` (0x77), which no
deterministic CBOR map (0xA0-0xBF, every other signed record's first byte) can start with, so a
batch signature never passes for any other signature, nor one kind of batch for the other."""
MAX_BATCH: Final = 256
"""Entries in one batch record at most (a record stays far below the broker's size limit)."""


@dataclasses.dataclass(frozen=True, slots=True)
class IngestTask:
    """One tick of one stream, as the scheduler issued it."""

    stream_id: str
    tick: int
    skip_from: int | None
    tick_height: int
    deadline_height: int
    task_definition_json: str
    result_schema_json: str
    proof_type: str
    num_runners: int
    runners: tuple[str, ...]
    scheduler: str
    signature: bytes = b""

    @property
    def task_id(self) -> bytes:
        return task_id(self.stream_id, self.tick)

    @property
    def task_definition(self) -> dict[str, Any]:
        return dict(json.loads(self.task_definition_json))

    @property
    def result_schema(self) -> dict[str, Any]:
        return dict(json.loads(self.result_schema_json))

    def signing_bytes(self) -> bytes:
        fields = {name: getattr(self, name) for name in _TASK_SIGNED}
        fields["runners"] = list(self.runners)
        return cbor.encode({"domain": TASK_DOMAIN, **fields})

    def signed(self, key: nacl.signing.SigningKey) -> IngestTask:
        """This task signed by the scheduler `key` (whose address must be `scheduler`)."""
        return dataclasses.replace(self, signature=bytes(key.sign(self.signing_bytes()).signature))


@dataclasses.dataclass(frozen=True, slots=True)
class IngestResult:
    """One runner's answer to one task: canonical JSON `result`, or an `error` reason."""

    task_id: bytes
    stream_id: str
    tick: int
    runner: str
    result_json: str | None
    error: str | None
    detail: str
    signature: bytes = b""

    def signing_bytes(self) -> bytes:
        return cbor.encode({"domain": RESULT_DOMAIN, **{name: getattr(self, name) for name in _RESULT_SIGNED}})

    def signed(self, key: nacl.signing.SigningKey) -> IngestResult:
        return dataclasses.replace(self, signature=bytes(key.sign(self.signing_bytes()).signature))


# The signed fields, in declaration order (read once: `dataclasses.fields` is slow on a hot path).
_TASK_SIGNED: Final = tuple(f.name for f in dataclasses.fields(IngestTask) if f.name != "signature")
_RESULT_SIGNED: Final = tuple(f.name for f in dataclasses.fields(IngestResult) if f.name != "signature")


def _verify(address: str, data: bytes, signature: bytes, what: str) -> None:
    try:
        nacl.signing.VerifyKey(public_key_from_address(address)).verify(data, signature)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
        raise InvalidSignatureError(f"the {what} signature does not verify for {address}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class SignedBatch:
    """A batch record: `signer` (the scheduler's or a runner's address) signed `body`, the Avro
    array of its entries, under the batch kind's domain."""

    signer: str
    body: bytes
    signature: bytes


def sign_batch(domain: bytes, body: bytes, key: nacl.signing.SigningKey) -> SignedBatch:
    """`body` signed by `key` under `domain` (`TASK_BATCH_DOMAIN` or `RESULT_BATCH_DOMAIN`)."""
    return SignedBatch(address_from_public_key(bytes(key.verify_key)), body,
                       bytes(key.sign(domain + body).signature))


def verify_task_batch(batch: SignedBatch, scheduler_address: str) -> None:
    """Refuse a task batch not signed by this deployment's scheduler: UNAUTHORIZED for another
    signer, INVALID_SIGNATURE for a bad signature. Its tasks are then checked with
    ``verify_task(..., batch_verified=True)``."""
    if batch.signer != scheduler_address:
        raise UnauthorizedError(f"the task batch names scheduler {batch.signer}, not this deployment's "
                                f"{scheduler_address}")
    _verify(batch.signer, TASK_BATCH_DOMAIN + batch.body, batch.signature, "task batch")


def verify_result_batch(batch: SignedBatch, registered: frozenset[str]) -> None:
    """Refuse a result batch not signed by a registered runner: UNAUTHORIZED, INVALID_SIGNATURE.
    Its results are then checked with ``check_result(..., batch_verified=True)``, and each must
    name the batch's signer as its runner (`check_batch_entry`)."""
    if batch.signer not in registered:
        raise UnauthorizedError(f"{batch.signer} is not a registered runner")
    _verify(batch.signer, RESULT_BATCH_DOMAIN + batch.body, batch.signature, "result batch")


def check_batch_entry(result: IngestResult, batch: SignedBatch) -> None:
    """A result in a runner's batch speaks for that runner only: MALFORMED_RECORD otherwise."""
    if result.runner != batch.signer or result.signature:
        raise MalformedRecordError("a result in a batch names the batch's signer and carries no signature of its own")


def config_json(value: Any) -> str:
    """A task definition or result schema as a task carries it: JSON with sorted keys, no spaces."""
    return json.dumps(to_tagged_json(value), sort_keys=True, separators=(",", ":"))


@dataclasses.dataclass(frozen=True, slots=True)
class TaskTemplate:
    """What every task of one stream repeats, serialised once: a scheduler issues a stream's tasks
    from it every block without serialising its config again."""

    task_definition_json: str
    result_schema_json: str
    proof_type: str
    num_runners: int

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> TaskTemplate:
        """The template of an IngestionConfig dict."""
        return cls(config_json(config["task_definition"]), config_json(config["result_schema"]),
                   str(config["proof_type"]), int(config["num_runners"]))


def new_task(*, stream_id: str, tick: int, tick_height: int, timeout_blocks: int,
             config: Mapping[str, Any] | TaskTemplate, runner_keys: tuple[bytes, ...],
             scheduler: nacl.signing.SigningKey, skip_from: int | None = None,
             scheduler_address: str | None = None, for_batch: bool = False) -> IngestTask:
    """The signed task of (stream, tick) under `config` (an IngestionConfig dict, or its
    `TaskTemplate`): runners selected from `runner_keys`, none for a skip notice.
    `scheduler_address` is the address of `scheduler`, when the caller already has it.
    `for_batch`: unsigned, for a task batch that `sign_batch` signs as a whole."""
    template = config if isinstance(config, TaskTemplate) else TaskTemplate.of(config)
    n = template.num_runners
    selected = () if skip_from is not None else select_runners(task_id(stream_id, tick), runner_keys, n)
    task = IngestTask(
        stream_id=stream_id, tick=tick, skip_from=skip_from, tick_height=tick_height,
        deadline_height=tick_height + timeout_blocks,
        task_definition_json=template.task_definition_json, result_schema_json=template.result_schema_json,
        proof_type=template.proof_type, num_runners=n,
        runners=tuple(address_from_public_key(k) for k in selected),
        scheduler=scheduler_address or address_from_public_key(bytes(scheduler.verify_key)),
    )
    return task if for_batch else task.signed(scheduler)


def verify_task(task: IngestTask, scheduler_address: str, runner_keys: tuple[bytes, ...] | None = None, *,
                batch_verified: bool = False) -> None:
    """Refuse a forged or inconsistent task: UNAUTHORIZED for another scheduler, INVALID_SIGNATURE
    for a bad signature, MALFORMED_RECORD for a selection that is not the deterministic one (when
    `runner_keys`, the registered list the task was issued under, is known) or bad fields.
    `batch_verified`: the task came in a task batch whose signature `verify_task_batch` checked
    (the task then carries no signature of its own)."""
    if task.scheduler != scheduler_address:
        raise UnauthorizedError(f"the task names scheduler {task.scheduler}, not this deployment's {scheduler_address}")
    if not batch_verified:
        _verify(task.scheduler, task.signing_bytes(), task.signature, "task")
    elif task.signature:
        raise MalformedRecordError("a task in a batch carries no signature of its own")
    try:
        ProofType(task.proof_type)
    except ValueError:
        raise MalformedRecordError(f"unknown proof type {task.proof_type!r}") from None
    if task.tick < 1 or task.deadline_height < task.tick_height or not 1 <= task.num_runners <= 255:
        raise MalformedRecordError("a task has tick ≥ 1, a deadline after its tick and 1..255 runners")
    if task.skip_from is not None:
        if not 1 <= task.skip_from <= task.tick or task.runners:
            raise MalformedRecordError("a skip notice covers ticks skip_from..tick and selects no runner")
        return
    if runner_keys is not None:
        expected = tuple(address_from_public_key(k) for k in select_runners(task.task_id, runner_keys,
                                                                             task.num_runners))
        if task.runners != expected:
            raise MalformedRecordError("the task's runners are not the deterministic selection from the registry")


def new_result(task: IngestTask, key: nacl.signing.SigningKey, *, result: bytes | None = None,
               error: IngestReason | None = None, detail: str = "", runner: str | None = None,
               for_batch: bool = False) -> IngestResult:
    """A runner's signed result for `task`; `for_batch`: unsigned, for a result batch that
    `sign_batch` signs as a whole. `runner` is the address of `key`, when the caller has it."""
    address = runner or address_from_public_key(bytes(key.verify_key))
    out = IngestResult(task.task_id, task.stream_id, task.tick, address,
                       None if result is None else result.decode("utf-8"), None if error is None else str(error),
                       detail[:512])
    return out if for_batch else out.signed(key)


def check_result(result: IngestResult, task: IngestTask, registered: frozenset[str], *,
                 batch_verified: bool = False) -> None:
    """Refuse a result that is not one of `task`'s selected, registered runners' signed answers:
    MALFORMED_RECORD (wrong task, or neither result nor error), UNAUTHORIZED (not registered, or
    not selected), INVALID_SIGNATURE. `batch_verified`: the result came in its runner's result
    batch, whose signature `verify_result_batch` checked (`check_batch_entry`)."""
    if (result.task_id, result.stream_id, result.tick) != (task.task_id, task.stream_id, task.tick):
        raise MalformedRecordError("the result names another task")
    if result.runner not in registered:
        raise UnauthorizedError(f"{result.runner} is not a registered runner")
    if result.runner not in task.runners:
        raise UnauthorizedError(f"{result.runner} was not selected for tick {task.tick} of {task.stream_id!r}")
    if not batch_verified:
        _verify(result.runner, result.signing_bytes(), result.signature, "result")
    if (result.result_json is None) == (result.error is None):
        raise MalformedRecordError("a result carries a result or an error, exactly one")
    if result.error is not None:
        try:
            IngestReason(result.error)
        except ValueError:
            raise MalformedRecordError(f"unknown error reason {result.error!r}") from None
