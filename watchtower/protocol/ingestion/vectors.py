"""The ingestion vector types: task ids, runner selection and registry, tasks, results and batches
(docs/ingestion.md).

``ingest_task_id``, ``runner_selection``, ``runner_registry``, ``ingest_task``,
``ingest_result_record``, ``ingest_batch_signature`` and ``ingest_result``: each computed by the
functions the scheduler, the runners and the aggregator use, for `conformance` to judge. The
vectors live in ``vectors/ingestion.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion import task_id
from watchtower.protocol.ingestion.proof import select_runners, selection_score
from watchtower.protocol.ingestion.records import (
    IngestResult,
    IngestTask,
    SignedBatch,
    check_result,
    verify_result_batch,
    verify_task,
    verify_task_batch,
)
from watchtower.protocol.ingestion.results import parse_result, validate_result
from watchtower.protocol.ingestion.runners import RunnerRegistry, decide_runner, evolve_runners
from watchtower.protocol.signed_command import Command
from watchtower.protocol.vector_input import Computation, VectorFormatError, field, hex_field, hex_list


def _ingest_task_id(inp: Mapping[str, Any]) -> dict[str, Any]:
    return {"task_id_hex": task_id(field(inp, "stream_id"), field(inp, "tick")).hex()}


def _runner_selection(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The task is named by its id, or by (stream_id, tick) whose id it is.
    tid = (hex_field(inp, "task_id_hex") if "task_id_hex" in inp
           else task_id(field(inp, "stream_id"), field(inp, "tick")))
    keys = hex_list(inp, "runner_public_keys_hex")
    selected = select_runners(tid, keys, field(inp, "num_runners"))
    return {
        "task_id_hex": tid.hex(),
        "selected": [{"address": address_from_public_key(k), "score_hex": selection_score(tid, k).hex()}
                     for k in selected],
    }


def _runner_registry(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The registry folded from its signed commands, as the registry's aggregate decides them; the
    # first refused command is the vector's error.
    steps = field(inp, "commands")
    if not isinstance(steps, list):
        raise VectorFormatError("input 'commands' must be a list")
    registrar = inp.get("registrar")  # the deployment's runner registrar; absent: open registration
    if registrar is not None and not isinstance(registrar, str):
        raise VectorFormatError("input 'registrar' must be an address")
    state, replies = RunnerRegistry(), []
    for step in steps:
        event, reply = decide_runner(state, Command.from_dict(field(step, "command")),
                                     block_height=field(step, "block_height"), registrar=registrar)
        if event is not None:
            state = evolve_runners(state, event)
        replies.append(dict(reply))
    return {
        "replies": replies,
        "runners": [{"address": a, "label": state.runners[a]} for a in sorted(state.runners)],
        "runner_public_keys_hex": [k.hex() for k in state.public_keys()],
    }


_TASK_FIELDS: Final = ("stream_id", "tick", "skip_from", "tick_height", "deadline_height", "task_definition_json",
                       "result_schema_json", "proof_type", "num_runners", "runners", "scheduler")


def _task_of(fields: Mapping[str, Any]) -> IngestTask:
    runners = field(fields, "runners")
    if not isinstance(runners, list):
        raise VectorFormatError("task 'runners' must be a list of addresses")
    return IngestTask(**{name: field(fields, name) for name in _TASK_FIELDS if name != "runners"},
                      runners=tuple(runners), signature=hex_field(fields, "signature_hex"))


def _ingest_task(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A task as a runner or an auditor checks it: the registered list is optional (null: unknown).
    task = _task_of(field(inp, "task"))
    registry = field(inp, "runner_public_keys_hex")
    keys = None if registry is None else tuple(hex_list(inp, "runner_public_keys_hex"))
    verify_task(task, field(inp, "scheduler_address"), keys)
    return {"task_id_hex": task.task_id.hex(), "signing_bytes_hex": task.signing_bytes().hex(),
            "runners": list(task.runners)}


def _ingest_result_record(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A runner's signed result as the aggregator checks it against its task and the registry.
    fields, registered = field(inp, "result"), field(inp, "registered")
    if not isinstance(registered, list):
        raise VectorFormatError("input 'registered' must be a list of addresses")
    result = IngestResult(
        task_id=hex_field(fields, "task_id_hex"), stream_id=field(fields, "stream_id"), tick=field(fields, "tick"),
        runner=field(fields, "runner"), result_json=field(fields, "result_json"), error=field(fields, "error"),
        detail=field(fields, "detail"), signature=hex_field(fields, "signature_hex"),
    )
    check_result(result, _task_of(field(inp, "task")), frozenset(registered))
    return {"runner": result.runner, "signing_bytes_hex": result.signing_bytes().hex()}


def _ingest_batch_signature(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A batch's one signature, over its domain and its body's exact bytes, checked before the body
    # is read: a task batch against the deployment's scheduler, a result batch against the registry.
    kind = field(inp, "kind")
    batch = SignedBatch(field(inp, "signer"), hex_field(inp, "body_hex"), hex_field(inp, "signature_hex"))
    if kind == "tasks":
        verify_task_batch(batch, field(inp, "scheduler_address"))
    elif kind == "results":
        registered = field(inp, "registered")
        if not isinstance(registered, list):
            raise VectorFormatError("input 'registered' must be a list of addresses")
        verify_result_batch(batch, frozenset(registered))
    else:
        raise VectorFormatError("input 'kind' must be 'tasks' or 'results'")
    return {"signer": batch.signer}


def _ingest_result(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The result's exact bytes are the UTF-8 of `result_text` (canonical JSON is what runners sign).
    text = field(inp, "result_text")
    if not isinstance(text, str):
        raise VectorFormatError("input 'result_text' must be a string")
    schema = field(inp, "result_schema")
    if not isinstance(schema, Mapping):
        raise VectorFormatError("input 'result_schema' must be an object")
    value = parse_result(text.encode("utf-8"))
    validate_result(value, schema)
    return {"value": value}


#: Vector type -> computation, for `conformance.COMPUTATIONS`.
COMPUTATIONS: Final[Mapping[str, Computation]] = {
    "ingest_task_id": _ingest_task_id,
    "runner_selection": _runner_selection,
    "runner_registry": _runner_registry,
    "ingest_task": _ingest_task,
    "ingest_result_record": _ingest_result_record,
    "ingest_result": _ingest_result,
    "ingest_batch_signature": _ingest_batch_signature,
}
