"""Regenerate ``ingestion.json``: ingestion conformance vectors (docs/ingestion.md).

    .venv/bin/python vectors/generate_ingestion.py > vectors/ingestion.json

Vector types:

- ``ingest_task_id``: the task id of (stream, tick);
- ``runner_registry``: the registered runners folded from signed register_runner / retire_runner
  commands (the list a selection is computed from), with each command's reply;
- ``runner_selection``: the runners a task selects from a registered list (rendezvous hashing),
  with each selected runner's score, so anyone holding the registry can recompute a task's runners;
- ``ingest_task``: a scheduler-signed task checked as a runner or auditor checks it (scheduler,
  signature, fields, and the selection recomputed from the registered list);
- ``ingest_result_record``: a runner's signed result checked against its task and the registry
  (the right task, a registered and selected runner, its signature, a result or an error);
- ``ingest_result``: a runner's result bytes checked against the stream's ``result_schema``
  (canonical JSON, safe integers, Draft 2020-12, no remote ``$ref``);
- ``ingest_batch_signature``: the one signature of a task batch (the scheduler's) or a result
  batch (a registered runner's) over its domain and its body's exact bytes (the Avro array of the
  ``IngestTaskBatch`` / ``IngestResultBatch`` record), checked before the body is read.

Keys come from fixed seeds and ed25519 signatures are deterministic, so the output is stable;
``tests/protocol/test_ingestion_vectors.py`` checks the committed file equals it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import nacl.signing

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion import IngestReason, task_id
from watchtower.protocol.ingestion.proof import select_runners, selection_score
from watchtower.protocol.ingestion.records import (
    RESULT_BATCH_DOMAIN,
    TASK_BATCH_DOMAIN,
    IngestResult,
    IngestTask,
    new_result,
    new_task,
    sign_batch,
)
from watchtower.protocol.ingestion.runners import RUNNERS_KEY
from watchtower.protocol.signed_command import sign_command
from watchtower.schemas.ingest_records import decode_results, decode_tasks, encode_result_batch, encode_task_batch

STREAM = "weather.sf-temperature"
SCHEDULER = nacl.signing.SigningKey(bytes([0x51]) * 32)
OTHER_SCHEDULER = nacl.signing.SigningKey(bytes([0x52]) * 32)
RUNNERS = [nacl.signing.SigningKey(bytes([0x60 + i]) * 32) for i in range(7)]
RUNNER_KEYS = [bytes(k.verify_key) for k in RUNNERS]
REGISTRAR = nacl.signing.SigningKey(bytes([0x53]) * 32)
CONFIG: dict[str, Any] = {
    "task_definition": {"kind": "http_json", "url": "https://weather.example/sf", "select": {"c": "$.temp_c"}},
    "result_schema": {"type": "object", "properties": {"c": {"type": "number"}}, "required": ["c"]},
    "proof_type": "MEDIAN",
    "num_runners": 3,
}


def _addr(key: bytes) -> str:
    return address_from_public_key(key)


def task_id_vectors() -> list[dict[str, Any]]:
    def vector(vid: str, stream_id: Any, tick: Any, error: str | None = None) -> dict[str, Any]:
        expect = {"error": error} if error else {"task_id_hex": task_id(stream_id, tick).hex()}
        return {"id": vid, "type": "ingest_task_id", "input": {"stream_id": stream_id, "tick": tick}, "expect": expect}

    return [
        vector("task-id-tick-1", STREAM, 1),
        vector("task-id-tick-2", STREAM, 2),
        vector("task-id-another-stream", "weather.nyc-temperature", 1),
        vector("task-id-large-tick", STREAM, 2**53 - 1),
        vector("task-id-tick-0", STREAM, 0, "INVALID_ARGUMENT"),
        vector("task-id-tick-as-text", STREAM, "1", "INVALID_ARGUMENT"),
        vector("task-id-empty-stream", "", 1, "INVALID_ARGUMENT"),
    ]


def registry_vectors() -> list[dict[str, Any]]:
    def register(i: int, nonce: int, label: str | None = None, height: int = 100) -> dict[str, Any]:
        command = sign_command(RUNNERS[i], "register_runner", RUNNERS_KEY, nonce, {"label": label or f"runner-{i}"})
        return {"block_height": height, "command": command.to_dict()}

    def retire(i: int, nonce: int, height: int = 100) -> dict[str, Any]:
        return {"block_height": height, "command": sign_command(RUNNERS[i], "retire_runner", RUNNERS_KEY, nonce,
                                                                {}).to_dict()}

    def reply(i: int, registered: bool = True, label: str | None = None, **extra: bool) -> dict[str, Any]:
        return {"runner": _addr(RUNNER_KEYS[i]), "registered": registered, "label": label or f"runner-{i}", **extra}

    def listed(*indexes: int) -> dict[str, Any]:
        rows = sorted((_addr(RUNNER_KEYS[i]), i) for i in indexes)
        return {"runners": [{"address": a, "label": f"runner-{i}"} for a, i in rows],
                "runner_public_keys_hex": [RUNNER_KEYS[i].hex() for _, i in rows]}

    def vector(vid: str, commands: list[dict[str, Any]], expect: dict[str, Any], *,
               registrar: bool = False) -> dict[str, Any]:
        inp: dict[str, Any] = {"commands": commands}
        if registrar:  # the deployment admits runners through its registrar only
            inp["registrar"] = _addr(bytes(REGISTRAR.verify_key))
        return {"id": vid, "type": "runner_registry", "input": inp, "expect": expect}

    def admit(i: int, nonce: int, runner: str | None = None) -> dict[str, Any]:
        body = {"runner": runner or _addr(RUNNER_KEYS[i]), "label": f"runner-{i}"}
        return {"block_height": 100, "command": sign_command(REGISTRAR, "register_runner", RUNNERS_KEY, nonce,
                                                             body).to_dict()}

    def dismiss(i: int, nonce: int) -> dict[str, Any]:
        return {"block_height": 100, "command": sign_command(REGISTRAR, "retire_runner", RUNNERS_KEY, nonce,
                                                             {"runner": _addr(RUNNER_KEYS[i])}).to_dict()}

    altered = register(2, 1)
    altered["command"]["body"]["label"] = "runner-9"
    elsewhere = register(0, 1)
    elsewhere["command"] = sign_command(RUNNERS[0], "register_runner", "weather.sf-temperature", 1,
                                        {"label": "runner-0"}).to_dict()
    return [
        vector("registry-seven-runners", [register(i, 1) for i in range(7)],
               {"replies": [reply(i) for i in range(7)], **listed(*range(7))}),
        vector("registry-one-retired", [*(register(i, 1) for i in range(3)), retire(1, 2)],
               {"replies": [reply(0), reply(1), reply(2), reply(1, registered=False)], **listed(0, 2)}),
        vector("registry-relabelled", [register(0, 1), register(0, 2, label="runner-0")],
               {"replies": [reply(0), reply(0)], **listed(0)}),
        vector("registry-retry-is-idempotent", [register(0, 1), register(0, 1)],
               {"replies": [reply(0), reply(0, duplicate=True)], **listed(0)}),
        vector("registry-retire-an-unregistered-runner", [register(0, 1), retire(1, 1)], {"error": "UNAUTHORIZED"}),
        vector("registry-nonce-reused-for-another-command", [register(0, 2), retire(0, 2)],
               {"error": "NONCE_REPLAYED"}),
        vector("registry-signed-label-altered", [altered], {"error": "INVALID_SIGNATURE"}),
        vector("registry-command-to-a-stream", [elsewhere], {"error": "INVALID_ARGUMENT"}),
        vector("registry-label-too-long", [register(0, 1, label="x" * 65)], {"error": "INVALID_ARGUMENT"}),
        # Admission: a deployment with a registrar (Deployment.runner_registrar).
        vector("registry-admitted-by-the-registrar", [admit(0, 1), admit(1, 2)],
               {"replies": [reply(0), reply(1)], **listed(0, 1)}, registrar=True),
        vector("registry-self-registration-refused-under-a-registrar", [register(0, 1)],
               {"error": "UNAUTHORIZED"}, registrar=True),
        vector("registry-the-registrar-retires-a-runner", [admit(0, 1), admit(1, 2), dismiss(1, 3)],
               {"replies": [reply(0), reply(1), reply(1, registered=False)], **listed(0)}, registrar=True),
        vector("registry-a-runner-retires-itself-under-a-registrar", [admit(0, 1), retire(0, 1)],
               {"replies": [reply(0), reply(0, registered=False)], **listed()}, registrar=True),
        vector("registry-admission-names-no-address", [admit(0, 1, runner="runner-0")],
               {"error": "INVALID_ARGUMENT"}, registrar=True),
        # Without a registrar, the registrar's key is just another caller: the body may not name a runner.
        vector("registry-naming-a-runner-without-a-registrar", [admit(0, 1)], {"error": "INVALID_ARGUMENT"}),
    ]


def _selection(tid: bytes, keys: list[bytes], n: int) -> dict[str, Any]:
    return {"task_id_hex": tid.hex(),
            "selected": [{"address": _addr(k), "score_hex": selection_score(tid, k).hex()}
                         for k in select_runners(tid, keys, n)]}


def selection_vectors() -> list[dict[str, Any]]:
    def vector(vid: str, tick: int, keys: list[bytes], n: int, *, by_id: bool = False) -> dict[str, Any]:
        tid = task_id(STREAM, tick)
        where: dict[str, Any] = {"task_id_hex": tid.hex()} if by_id else {"stream_id": STREAM, "tick": tick}
        return {"id": vid, "type": "runner_selection",
                "input": {**where, "runner_public_keys_hex": [k.hex() for k in keys], "num_runners": n},
                "expect": _selection(tid, keys, n)}

    return [
        vector("select-3-of-7-tick-1", 1, RUNNER_KEYS, 3),
        vector("select-3-of-7-tick-2", 2, RUNNER_KEYS, 3),
        vector("select-3-of-7-tick-3", 3, RUNNER_KEYS, 3),
        # The order the registry is read in does not matter.
        vector("select-3-of-7-tick-1-registry-reversed", 1, RUNNER_KEYS[::-1], 3),
        vector("select-3-of-7-by-task-id", 1, RUNNER_KEYS, 3, by_id=True),
        # A runner leaving moves only the tasks it held.
        vector("select-3-of-6-tick-1-one-runner-retired", 1, RUNNER_KEYS[:5] + RUNNER_KEYS[6:], 3),
        vector("select-3-of-6-tick-1-a-selected-runner-retired", 1,
               [k for k in RUNNER_KEYS if k != select_runners(task_id(STREAM, 1), RUNNER_KEYS, 1)[0]], 3),
        vector("select-1-of-7-tick-1", 1, RUNNER_KEYS, 1),
        vector("select-7-of-7-tick-1", 1, RUNNER_KEYS, 7),
        vector("select-5-of-3-registered-gives-all-3", 1, RUNNER_KEYS[:3], 5),
        vector("select-listed-twice-counts-once", 1, RUNNER_KEYS[:3] + RUNNER_KEYS[:2], 3),
        vector("select-from-an-empty-registry", 1, [], 3),
    ]


def _task_input(task: IngestTask) -> dict[str, Any]:
    fields = dataclasses.asdict(task)
    fields["runners"] = list(task.runners)
    fields["signature_hex"] = fields.pop("signature").hex()
    return fields


def task_vectors() -> list[dict[str, Any]]:
    scheduler = _addr(bytes(SCHEDULER.verify_key))

    def vector(vid: str, task: IngestTask, expect: dict[str, Any], *, registry: list[bytes] | None = RUNNER_KEYS,
               scheduler_address: str = scheduler) -> dict[str, Any]:
        return {"id": vid, "type": "ingest_task",
                "input": {"task": _task_input(task), "scheduler_address": scheduler_address,
                          "runner_public_keys_hex": None if registry is None else [k.hex() for k in registry]},
                "expect": expect}

    def ok(task: IngestTask) -> dict[str, Any]:
        return {"task_id_hex": task.task_id.hex(), "signing_bytes_hex": task.signing_bytes().hex(),
                "runners": list(task.runners)}

    task = new_task(stream_id=STREAM, tick=4, tick_height=1_004, timeout_blocks=3, config=CONFIG,
                    runner_keys=tuple(RUNNER_KEYS), scheduler=SCHEDULER)
    skip = new_task(stream_id=STREAM, tick=20, tick_height=1_020, timeout_blocks=3, config=CONFIG,
                    runner_keys=tuple(RUNNER_KEYS), scheduler=SCHEDULER, skip_from=5)
    others = tuple(_addr(k) for k in RUNNER_KEYS if _addr(k) not in task.runners)[:3]
    resigned = dataclasses.replace(task, runners=others).signed(SCHEDULER)
    sig = task.signature
    return [
        vector("task-signed-by-the-scheduler", task, ok(task)),
        vector("task-checked-without-the-registry", task, ok(task), registry=None),
        vector("task-skip-notice", skip, ok(skip)),
        vector("task-another-scheduler", task, {"error": "UNAUTHORIZED"},
               scheduler_address=_addr(bytes(OTHER_SCHEDULER.verify_key))),
        vector("task-signed-by-another-key", task.signed(OTHER_SCHEDULER),
               {"error": "INVALID_SIGNATURE"}),
        vector("task-signature-byte-flipped", dataclasses.replace(task, signature=bytes([sig[0] ^ 1]) + sig[1:]),
               {"error": "INVALID_SIGNATURE"}),
        vector("task-runners-changed-after-signing", dataclasses.replace(task, runners=others),
               {"error": "INVALID_SIGNATURE"}),
        vector("task-runners-not-the-selection", resigned, {"error": "MALFORMED_RECORD"}),
        # Without the registry the selection cannot be recomputed; the signature still holds.
        vector("task-runners-not-the-selection-without-the-registry", resigned, ok(resigned), registry=None),
        vector("task-selection-from-another-registry", task, {"error": "MALFORMED_RECORD"}, registry=RUNNER_KEYS[:4]),
        vector("task-unknown-proof-type", dataclasses.replace(task, proof_type="MAJORITY").signed(SCHEDULER),
               {"error": "MALFORMED_RECORD"}),
        vector("task-deadline-before-its-tick", dataclasses.replace(task, deadline_height=1_003).signed(SCHEDULER),
               {"error": "MALFORMED_RECORD"}),
        vector("task-skip-notice-with-runners", dataclasses.replace(skip, runners=task.runners).signed(SCHEDULER),
               {"error": "MALFORMED_RECORD"}),
        vector("task-skip-from-after-its-tick", dataclasses.replace(skip, skip_from=21).signed(SCHEDULER),
               {"error": "MALFORMED_RECORD"}),
    ]


def _result_input(result: IngestResult) -> dict[str, Any]:
    fields = dataclasses.asdict(result)
    fields["task_id_hex"] = fields.pop("task_id").hex()
    fields["signature_hex"] = fields.pop("signature").hex()
    return fields


def result_record_vectors() -> list[dict[str, Any]]:
    task = new_task(stream_id=STREAM, tick=4, tick_height=1_004, timeout_blocks=3, config=CONFIG,
                    runner_keys=tuple(RUNNER_KEYS), scheduler=SCHEDULER)
    other_task = new_task(stream_id=STREAM, tick=5, tick_height=1_005, timeout_blocks=3, config=CONFIG,
                          runner_keys=tuple(RUNNER_KEYS), scheduler=SCHEDULER)
    by_address = {_addr(k): key for k, key in zip(RUNNER_KEYS, RUNNERS, strict=True)}
    selected = by_address[task.runners[0]]
    unselected = next(key for a, key in by_address.items() if a not in task.runners)
    outsider = nacl.signing.SigningKey(bytes([0x70]) * 32)
    registered = sorted(by_address)

    def vector(vid: str, result: IngestResult, expect: dict[str, Any], *, of: IngestTask = task,
               registry: list[str] = registered) -> dict[str, Any]:
        return {"id": vid, "type": "ingest_result_record",
                "input": {"task": _task_input(of), "registered": registry, "result": _result_input(result)},
                "expect": expect}

    def ok(result: IngestResult) -> dict[str, Any]:
        return {"runner": result.runner, "signing_bytes_hex": result.signing_bytes().hex()}

    answer = new_result(task, selected, result=b'{"c":17.25}')
    failure = new_result(task, selected, error=IngestReason.SOURCE_UNAVAILABLE, detail="HTTP 503 from the source")
    sig = answer.signature
    return [
        vector("result-record-from-a-selected-runner", answer, ok(answer)),
        vector("result-record-error-from-a-selected-runner", failure, ok(failure)),
        vector("result-record-for-another-task", new_result(other_task, selected, result=b'{"c":1}'),
               {"error": "MALFORMED_RECORD"}),
        vector("result-record-from-an-unregistered-runner", new_result(task, outsider, result=b'{"c":17.25}'),
               {"error": "UNAUTHORIZED"}),
        vector("result-record-from-a-retired-runner", answer, {"error": "UNAUTHORIZED"},
               registry=[a for a in registered if a != answer.runner]),
        vector("result-record-from-a-runner-not-selected", new_result(task, unselected, result=b'{"c":17.25}'),
               {"error": "UNAUTHORIZED"}),
        vector("result-record-signature-byte-flipped",
               dataclasses.replace(answer, signature=bytes([sig[0] ^ 1]) + sig[1:]), {"error": "INVALID_SIGNATURE"}),
        vector("result-record-value-changed-after-signing", dataclasses.replace(answer, result_json='{"c":99}'),
               {"error": "INVALID_SIGNATURE"}),
        vector("result-record-with-a-result-and-an-error",
               dataclasses.replace(answer, error="TIMEOUT").signed(selected), {"error": "MALFORMED_RECORD"}),
        vector("result-record-with-neither", dataclasses.replace(answer, result_json=None).signed(selected),
               {"error": "MALFORMED_RECORD"}),
        vector("result-record-unknown-error-reason",
               dataclasses.replace(failure, error="SOURCE_ON_FIRE").signed(selected), {"error": "MALFORMED_RECORD"}),
    ]


SCHEMA = CONFIG["result_schema"]


def result_vectors() -> list[dict[str, Any]]:
    def vector(vid: str, text: str, expect: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
        return {"id": vid, "type": "ingest_result", "input": {"result_text": text, "result_schema": schema},
                "expect": expect}

    numbers = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
    return [
        vector("result-accepted", '{"c":17.25}', {"value": {"c": 17.25}}),
        vector("result-accepted-extra-field", '{"c":-3,"station":"SFO"}', {"value": {"c": -3, "station": "SFO"}}),
        vector("result-accepted-largest-safe-integer", f'{{"c":{2**53 - 1}}}', {"value": {"c": 2**53 - 1}}),
        vector("result-accepted-array", "[1,2,3]", {"value": [1, 2, 3]}, numbers),
        vector("result-missing-required-field", '{"temp":17}', {"error": "SCHEMA_MISMATCH"}),
        vector("result-wrong-type", '{"c":"17"}', {"error": "SCHEMA_MISMATCH"}),
        vector("result-too-many-items", "[1,2,3,4]", {"error": "SCHEMA_MISMATCH"}, numbers),
        vector("result-schema-refers-to-a-remote-document", '{"c":1}', {"error": "SCHEMA_MISMATCH"},
               {"$ref": "https://schemas.example/temperature.json"}),
        vector("result-schema-is-not-a-json-schema", '{"c":1}', {"error": "INVALID_ARGUMENT"}, {"type": 5}),
        vector("result-not-canonical-whitespace", '{"c": 17}', {"error": "INVALID_ARGUMENT"}),
        vector("result-not-canonical-key-order", '{"station":"SFO","c":1}', {"error": "INVALID_ARGUMENT"}),
        vector("result-not-canonical-escaped-unicode", '{"c":1,"station":"S\\u00e9"}', {"error": "INVALID_ARGUMENT"}),
        vector("result-integer-beyond-2-53", f'{{"c":{2**53}}}', {"error": "INVALID_ARGUMENT"}),
        vector("result-nan", '{"c":NaN}', {"error": "INVALID_ARGUMENT"}),
        vector("result-overflowing-number", '{"c":1e400}', {"error": "INVALID_ARGUMENT"}),
        vector("result-not-json", "{c:1}", {"error": "INVALID_ARGUMENT"}),
        vector("result-empty", "", {"error": "INVALID_ARGUMENT"}),
    ]


def batch_vectors() -> list[dict[str, Any]]:
    scheduler = _addr(bytes(SCHEDULER.verify_key))
    runner = _addr(bytes(RUNNERS[0].verify_key))
    tasks = [dataclasses.replace(new_task(stream_id=STREAM, tick=t, tick_height=1_000 + t, timeout_blocks=3,
                                          config=CONFIG, runner_keys=tuple(RUNNER_KEYS), scheduler=SCHEDULER),
                                 signature=b"") for t in (4, 5)]
    task_batch = decode_tasks(encode_task_batch(tasks, SCHEDULER))
    results = [new_result(t, RUNNERS[0], result=b'{"c":12.5}', for_batch=True) for t in tasks]
    result_batch = decode_results(encode_result_batch(results, RUNNERS[0]))
    assert not isinstance(task_batch, IngestTask)
    assert not isinstance(result_batch, IngestResult)

    def vector(vid: str, kind: str, signer: str, body: bytes, signature: bytes, expect: dict[str, Any],
               **extra: Any) -> dict[str, Any]:
        return {"id": vid, "type": "ingest_batch_signature",
                "input": {"kind": kind, "signer": signer, "body_hex": body.hex(), "signature_hex": signature.hex(),
                          **extra}, "expect": expect}

    flipped = bytes([task_batch.body[0] ^ 1]) + task_batch.body[1:]
    other = sign_batch(TASK_BATCH_DOMAIN, task_batch.body, OTHER_SCHEDULER)
    as_results = sign_batch(RESULT_BATCH_DOMAIN, task_batch.body, SCHEDULER)  # the other kind's domain
    return [
        vector("task-batch-signed-by-the-scheduler", "tasks", scheduler, task_batch.body, task_batch.signature,
               {"signer": scheduler}, scheduler_address=scheduler),
        vector("task-batch-body-changed-after-signing", "tasks", scheduler, flipped, task_batch.signature,
               {"error": "INVALID_SIGNATURE"}, scheduler_address=scheduler),
        vector("task-batch-of-another-scheduler", "tasks", other.signer, other.body, other.signature,
               {"error": "UNAUTHORIZED"}, scheduler_address=scheduler),
        vector("task-batch-signed-under-the-result-domain", "tasks", scheduler, as_results.body, as_results.signature,
               {"error": "INVALID_SIGNATURE"}, scheduler_address=scheduler),
        vector("result-batch-of-a-registered-runner", "results", runner, result_batch.body, result_batch.signature,
               {"signer": runner}, registered=[runner]),
        vector("result-batch-of-an-unregistered-runner", "results", runner, result_batch.body,
               result_batch.signature, {"error": "UNAUTHORIZED"}, registered=[scheduler]),
        vector("result-batch-signed-under-the-task-domain", "results", runner, result_batch.body,
               sign_batch(TASK_BATCH_DOMAIN, result_batch.body, RUNNERS[0]).signature,
               {"error": "INVALID_SIGNATURE"}, registered=[runner]),
    ]


def document() -> dict[str, Any]:
    """The whole vectors file."""
    return {"format": "watchtower-vectors/1",
            "vectors": task_id_vectors() + registry_vectors() + selection_vectors() + task_vectors()
            + result_record_vectors() + result_vectors() + batch_vectors()}


if __name__ == "__main__":
    json.dump(document(), sys.stdout, indent=1)
    sys.stdout.write("\n")
