"""Run conformance vectors (format ``watchtower-vectors/1``, DESIGN §7.9) with the project's code.

Every result is computed from the vector's `input` by the same functions the services use, then
compared with `expect`: a dict of result fields (which must match exactly: same keys, same
values), or ``{"error": CODE}`` where ``"*"`` accepts any Watchtower error. A vector whose
expectation is wrong therefore fails, as does a vector this checker cannot read.

Besides the shared types, the project's own files in ``vectors/`` use ``key_chain``
(docs/key-chain.md), ``keyload_check``, ``keyload_open``, ``keyload_psk_open``, ``reseal_open``,
``masked_payload``, ``unmask``
(docs/private-feeds.md) and ``ingest_task_id``, ``runner_registry``, ``runner_selection``,
``ingest_task``, ``ingest_result_record``, ``ingest_result``, ``ingest_batch_signature``
(docs/ingestion.md) and
``account_ledger`` (docs/ledger.md: signed account commands and purchases run through the key
manager's instances, `ledger_run`). A type this checker does not know fails its vector.

Pure: callers read the files and hand over the parsed JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.envelope import (
    decrypt_for_epoch,
    derive_content_key,
    derive_nonce,
    encrypt_for_epoch,
    envelope_aad,
)
from watchtower.protocol.confidential.keyload import (
    KeyloadPart,
    check_keyload,
    decode_part,
    open_keyload,
    open_keyload_psk,
    part_for,
)
from watchtower.protocol.confidential.reseal import decode_reseal, open_reseal
from watchtower.protocol.confidential.session_key import key_commitment, mask, masked_aad, payload_key, unmask
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import AccessMode, parse_access_mode
from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError, WatchtowerError
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
from watchtower.protocol.ledger.billing import acquire_epoch_access
from watchtower.protocol.ledger.common import PAID_PREFIX, PaidCommand
from watchtower.protocol.ledger.paid import EpochPricing
from watchtower.protocol.ledger.run import LedgerRun
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import (
    message_signing_bytes,
    public_key_of,
    sign_message,
    signing_key_from_seed,
    verify_message,
)
from watchtower.protocol.stream.filters import evaluate, parse_filter
from watchtower.protocol.stream.key_chain import key_chain_from_json, key_chain_owner, verify_key_chain
from watchtower.protocol.stream.key_schedule import KeySchedule
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.ring_window import get_since_range

VECTOR_FORMAT: Final = "watchtower-vectors/1"
ANY_ERROR: Final = "*"


class VectorFormatError(InvalidArgumentError):
    """The vector itself is unreadable (missing or mistyped input); reported as a FAIL."""


@dataclasses.dataclass(frozen=True, slots=True)
class VectorOutcome:
    """One vector's verdict; `reason` says why it failed (None when it passed)."""

    vector_id: str
    vector_type: str
    passed: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: id, type, passed, reason."""
        return {"id": self.vector_id, "type": self.vector_type, "passed": self.passed, "reason": self.reason}


# --- Input access ----------------------------------------------------------------------------------


def _get(data: Mapping[str, Any], key: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise VectorFormatError(f"input lacks {key!r}")
    return data[key]


def _hex(data: Mapping[str, Any], key: str) -> bytes:
    value = _get(data, key)
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise VectorFormatError(f"input {key!r} is not a hex string") from None


def _hex_list(data: Mapping[str, Any], key: str) -> list[bytes]:
    values = _get(data, key)
    if not isinstance(values, list):
        raise VectorFormatError(f"input {key!r} must be a list of hex strings")
    try:
        return [bytes.fromhex(v) for v in values]
    except (TypeError, ValueError):
        raise VectorFormatError(f"input {key!r} must be a list of hex strings") from None


# --- One computation per vector type ---------------------------------------------------------------


def _signing(inp: Mapping[str, Any]) -> dict[str, Any]:
    key = signing_key_from_seed(_hex(inp, "signer_seed_hex"))
    msg = sign_message(
        stream_id=_get(inp, "stream_id"),
        version=_get(inp, "version"),
        sequence=_get(inp, "sequence"),
        timestamp_unix_ms=_get(inp, "timestamp_unix_ms"),
        kind=_get(inp, "kind"),
        content_type=_get(inp, "content_type"),
        tags=_get(inp, "tags"),
        payload_format=_get(inp, "payload_format"),
        key_epoch=_get(inp, "key_epoch"),
        signing_key_id=_get(inp, "signing_key_id"),
        payload=_hex(inp, "payload_hex"),
        signing_key=key,
    )
    return {
        "payload_hash_hex": msg.payload_hash.hex(),
        "signing_bytes_hex": message_signing_bytes(msg).hex(),
        "public_key_hex": public_key_of(key).hex(),
        "publisher_sig_hex": msg.publisher_sig.hex(),
    }


def _verify(inp: Mapping[str, Any]) -> dict[str, Any]:
    fields = _get(inp, "message")
    msg = StreamMessage(
        stream_id=_get(fields, "stream_id"),
        version=_get(fields, "version"),
        sequence=_get(fields, "sequence"),
        timestamp_unix_ms=_get(fields, "timestamp_unix_ms"),
        kind=_get(fields, "kind"),
        content_type=_get(fields, "content_type"),
        tags=_get(fields, "tags"),
        payload_format=_get(fields, "payload_format"),
        key_epoch=_get(fields, "key_epoch"),
        signing_key_id=_get(fields, "signing_key_id"),
        payload_inline=_hex(fields, "payload_hex"),
        payload_hash=_hex(fields, "payload_hash_hex"),
        publisher_sig=_hex(fields, "publisher_sig_hex"),
    )
    return {"valid": verify_message(msg, _hex(inp, "public_key_hex"))}


def _filter(inp: Mapping[str, Any]) -> dict[str, Any]:
    node = parse_filter(_get(inp, "filter"))
    return {"match": evaluate(node, _get(inp, "headers"))}


def _get_since(inp: Mapping[str, Any]) -> dict[str, Any]:
    sequences = get_since_range(
        _get(inp, "head"), _get(inp, "ring_buffer_capacity"), _get(inp, "cursor"), _get(inp, "limit")
    )
    return {"sequences": list(sequences)}


def _key_schedule(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The vectors name no keys, only ids; distinct stand-in keys per id are enough.
    def stand_in_key(key_id: int) -> bytes:
        return hashlib.sha256(f"conformance-key-{key_id}".encode()).digest()

    schedule = KeySchedule.initial(stand_in_key(1))
    head = 0
    ops = _get(inp, "ops")
    if not isinstance(ops, list):
        raise VectorFormatError("input 'ops' must be a list")
    for op in ops:
        name = _get(op, "op")
        if name == "publish":
            count = _get(op, "count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise VectorFormatError("a publish op needs a non-negative integer 'count'")
            head += count
        elif name == "rotate":
            schedule = schedule.rotate(stand_in_key(schedule.current.signing_key_id + 1), head_sequence=head)
        else:
            raise VectorFormatError(f"unknown key_schedule op {name!r}")
    resolutions = []
    for sequence in _get(inp, "queries"):
        entry = schedule.key_at_sequence(sequence)
        resolutions.append(
            {
                "sequence": sequence,
                "signing_key_id": entry.signing_key_id,
                "effective_sequence": entry.effective_sequence,
            }
        )
    return {"resolutions": resolutions}


def _key_chain(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The chain as the key history serves it (entries with their signed commands), checked from
    # the owner's address alone (docs/key-chain.md).
    expected = inp.get("expected_owner")
    schedule = verify_key_chain(_get(inp, "stream_id"), key_chain_from_json(_get(inp, "chain")), expected)
    return {
        "owner": key_chain_owner(schedule),
        "entries": [
            {"signing_key_id": e.signing_key_id, "publisher_key": e.public_key.hex(),
             "effective_sequence": e.effective_sequence}
            for e in schedule.entries
        ],
    }


def _billing(inp: Mapping[str, Any]) -> dict[str, Any]:
    mode = parse_access_mode(_get(inp, "access_mode"))
    pricing = None
    if mode is AccessMode.PLATFORM_MANAGED:
        pricing = EpochPricing(
            _get(inp, "fee_per_key_epoch_cby"),
            _get(inp, "protocol_fee_bps"),
            _get(inp, "min_purchase_epochs"),
        )
    decision = acquire_epoch_access(
        access_mode=mode,
        pricing=pricing,
        current_key_epoch=_get(inp, "current_key_epoch"),
        target_key_epoch=_get(inp, "target_key_epoch"),
        active_until_key_epoch=_get(inp, "active_until_key_epoch"),
        payer_balance_cby=_get(inp, "payer_balance_cby"),
    )
    receipt = decision.receipt
    result: dict[str, Any] = {}
    if not decision.idempotent:
        # An idempotent call charges no range, so the vectors leave from/to out for it.
        result["from_key_epoch"] = receipt.from_key_epoch
        result["to_key_epoch"] = receipt.to_key_epoch
    result.update(
        epochs_charged=receipt.epochs_charged,
        publisher_amount_cby=receipt.publisher_amount_cby,
        protocol_fee_cby=receipt.protocol_fee_cby,
        total_amount_cby=receipt.total_amount_cby,
        active_until_key_epoch=decision.active_until_key_epoch,
        idempotent=decision.idempotent,
    )
    return result


def _epoch_envelope(inp: Mapping[str, Any]) -> dict[str, Any]:
    seed = _hex(inp, "master_seed_hex")
    stream_id, key_epoch, actor_nonce = (
        _get(inp, "stream_id"),
        _get(inp, "key_epoch"),
        _get(inp, "actor_nonce"),
    )
    sequence, kind, content_type = _get(inp, "sequence"), _get(inp, "kind"), _get(inp, "content_type")
    envelope = encrypt_for_epoch(
        master_seed=seed,
        stream_id=stream_id,
        key_epoch=key_epoch,
        actor_nonce=actor_nonce,
        sequence=sequence,
        kind=kind,
        content_type=content_type,
        plaintext=_hex(inp, "plaintext_hex"),
    )
    content_key = derive_content_key(seed, stream_id, key_epoch)
    aad = envelope_aad(
        stream_id=stream_id, sequence=sequence, key_epoch=key_epoch, kind=kind, content_type=content_type
    )
    return {
        "content_key_hex": content_key.hex(),
        "nonce_hex": derive_nonce(content_key, stream_id, key_epoch, actor_nonce).hex(),
        "aad_hex": aad.hex(),
        "envelope_hex": envelope.hex(),
    }


def _decrypt(inp: Mapping[str, Any]) -> dict[str, Any]:
    plaintext = decrypt_for_epoch(
        master_seed=_hex(inp, "master_seed_hex"),
        stream_id=_get(inp, "stream_id"),
        key_epoch=_get(inp, "key_epoch"),
        sequence=_get(inp, "sequence"),
        kind=_get(inp, "kind"),
        content_type=_get(inp, "content_type"),
        envelope=_hex(inp, "envelope_hex"),
    )
    return {"plaintext_hex": plaintext.hex()}


def _keyload_parts(inp: Mapping[str, Any]) -> list[KeyloadPart]:
    return [decode_part(raw) for raw in _hex_list(inp, "parts_hex")]


def _keyload_check(inp: Mapping[str, Any]) -> dict[str, Any]:
    # Every part of one keyload, as a subscriber that read them all checks it (docs/private-feeds.md).
    summary = check_keyload(_keyload_parts(inp))
    out = {
        "keyload_id_hex": summary.keyload_id.hex(),
        "stream_id": summary.stream_id,
        "branch": summary.branch,
        "parts": len(_get(inp, "parts_hex")),
        "members": [{"address": m.address, "account_key_id": m.account_key_id} for m in summary.members],
        "members_digest_hex": summary.members_digest.hex(),
        "key_commitment_hex": summary.key_commitment.hex(),
    }
    if summary.psk_ids:  # a keyload with pre-shared-key holders also names their ids
        out["psk_ids_hex"] = [pid.hex() for pid in summary.psk_ids]
    return out


def _keyload_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A member reads only the part whose address range holds it, as ConfidentialReader does.
    address = _get(inp, "address")
    part = part_for(_keyload_parts(inp), address)
    if part is None:
        raise UnauthorizedError(f"{address} is in no part of this keyload: not a member")
    session_key = open_keyload(part, address, _hex(inp, "test_only_x25519_secret_key_hex"))
    found = next(m for m, _ in part.entries if m.address == address)
    return {
        "keyload_id_hex": part.keyload_id.hex(),
        "part": part.part,
        "account_key_id": found.account_key_id,
        "session_key_hex": session_key.hex(),
        "key_commitment_hex": key_commitment(session_key, part.keyload_id).hex(),
    }


def _reseal_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A member added later opens a past keyload's key; with the keyload's own commitment when it
    # read the keyload (ConfidentialReader passes it), so a reseal cannot swap in another key.
    address = _get(inp, "address")
    reseal = decode_reseal(_hex(inp, "reseal_hex"))
    commitment = _hex(inp, "keyload_key_commitment_hex") if "keyload_key_commitment_hex" in inp else None
    session_key = open_reseal(reseal, address, _hex(inp, "test_only_x25519_secret_key_hex"), commitment=commitment)
    found = next(m for m, _ in reseal.entries if m.address == address)
    return {
        "keyload_id_hex": reseal.keyload_id.hex(),
        "account_key_id": found.account_key_id,
        "session_key_hex": session_key.hex(),
        "key_commitment_hex": key_commitment(session_key, reseal.keyload_id).hex(),
    }


def _mask_context(inp: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "keyload_id": _hex(inp, "keyload_id_hex"),
        "stream_id": _get(inp, "stream_id"),
        "sequence": _get(inp, "sequence"),
        "branch": _get(inp, "branch"),
        "kind": _get(inp, "kind"),
        "content_type": _get(inp, "content_type"),
    }


def _masked_payload(inp: Mapping[str, Any]) -> dict[str, Any]:
    session_key, context = _hex(inp, "session_key_hex"), _mask_context(inp)
    masked = mask(session_key, plaintext=_hex(inp, "plaintext_hex"), nonce=_hex(inp, "nonce_hex"), **context)
    return {
        "payload_key_hex": payload_key(session_key, context["keyload_id"]).hex(),
        "aad_hex": masked_aad(**context).hex(),
        "masked_hex": masked.hex(),
    }


def _unmask(inp: Mapping[str, Any]) -> dict[str, Any]:
    plaintext = unmask(_hex(inp, "session_key_hex"), _hex(inp, "masked_hex"), **_mask_context(inp))
    return {"plaintext_hex": plaintext.hex()}


def _ingest_task_id(inp: Mapping[str, Any]) -> dict[str, Any]:
    return {"task_id_hex": task_id(_get(inp, "stream_id"), _get(inp, "tick")).hex()}


def _runner_selection(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The task is named by its id, or by (stream_id, tick) whose id it is.
    tid = _hex(inp, "task_id_hex") if "task_id_hex" in inp else task_id(_get(inp, "stream_id"), _get(inp, "tick"))
    keys = _hex_list(inp, "runner_public_keys_hex")
    selected = select_runners(tid, keys, _get(inp, "num_runners"))
    return {
        "task_id_hex": tid.hex(),
        "selected": [{"address": address_from_public_key(k), "score_hex": selection_score(tid, k).hex()}
                     for k in selected],
    }


def _runner_registry(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The registry folded from its signed commands, as the registry's aggregate decides them; the
    # first refused command is the vector's error.
    steps = _get(inp, "commands")
    if not isinstance(steps, list):
        raise VectorFormatError("input 'commands' must be a list")
    registrar = inp.get("registrar")  # the deployment's runner registrar; absent: open registration
    if registrar is not None and not isinstance(registrar, str):
        raise VectorFormatError("input 'registrar' must be an address")
    state, replies = RunnerRegistry(), []
    for step in steps:
        event, reply = decide_runner(state, Command.from_dict(_get(step, "command")),
                                     block_height=_get(step, "block_height"), registrar=registrar)
        if event is not None:
            state = evolve_runners(state, event)
        replies.append(dict(reply))
    return {
        "replies": replies,
        "runners": [{"address": a, "label": state.runners[a]} for a in sorted(state.runners)],
        "runner_public_keys_hex": [k.hex() for k in state.public_keys()],
    }


def _keyload_psk_open(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A pre-shared-key holder, named by its PSK id, opens the session key from part 0.
    part = next((p for p in _keyload_parts(inp) if p.part == 0), None)
    if part is None:
        raise UnauthorizedError("PSK entries ride in part 0 of a keyload, and it was not given")
    session_key = open_keyload_psk(part, _hex(inp, "psk_id_hex"), _hex(inp, "test_only_psk_hex"))
    return {"keyload_id_hex": part.keyload_id.hex(), "session_key_hex": session_key.hex(),
            "key_commitment_hex": key_commitment(session_key, part.keyload_id).hex(),
            "psk_ids_hex": [pid.hex() for pid, _ in part.psk_entries]}


def _account_ledger(inp: Mapping[str, Any]) -> dict[str, Any]:
    # Signed commands (and paid streams' registrations) decided in order by the key manager's
    # instances at one block height; each step's answer, then the state the checks ask about.
    deployment = _get(inp, "deployment")
    run = LedgerRun(Deployment(protocol_treasury=_get(deployment, "protocol_treasury"),
                               cby_minter=_get(deployment, "cby_minter")), _get(inp, "block_height"))
    steps = _get(inp, "steps")
    if not isinstance(steps, list):
        raise VectorFormatError("input 'steps' must be a list")
    answers: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, Mapping) and "paid_command" in step:
            create = Command.from_dict(step["paid_command"])
            answer = run.send(PaidCommand(create), PAID_PREFIX + create.stream_id)
        else:
            answer = run.send(Command.from_dict(_get(step, "command")))
        answers.append(answer["result"] if answer["ok"] else {"error": answer["error"].code})
    checks = _get(inp, "checks")
    allowances = []
    for q in _get(checks, "allowances"):
        found = run.account(_get(q, "account")).allowance(_get(q, "spender"), _get(q, "stream_id"))
        allowances.append(None if found is None else found.to_dict())
    return {
        "answers": answers,
        "balances": {a: str(run.account(a).balance_cby) for a in _get(checks, "balances")},
        "actor_authorized": [run.account(_get(q, "account")).actor_authorized(_get(q, "actor"), _get(q, "stream_id"))
                             for q in _get(checks, "actor_authorized")],
        "allowances": allowances,
        "entitlements": [run.active_until(_get(q, "stream_id"), _get(q, "account"))
                         for q in _get(checks, "entitlements")],
    }


_TASK_FIELDS: Final = ("stream_id", "tick", "skip_from", "tick_height", "deadline_height", "task_definition_json",
                       "result_schema_json", "proof_type", "num_runners", "runners", "scheduler")


def _task_of(fields: Mapping[str, Any]) -> IngestTask:
    runners = _get(fields, "runners")
    if not isinstance(runners, list):
        raise VectorFormatError("task 'runners' must be a list of addresses")
    return IngestTask(**{name: _get(fields, name) for name in _TASK_FIELDS if name != "runners"},
                      runners=tuple(runners), signature=_hex(fields, "signature_hex"))


def _ingest_task(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A task as a runner or an auditor checks it: the registered list is optional (null: unknown).
    task = _task_of(_get(inp, "task"))
    registry = _get(inp, "runner_public_keys_hex")
    keys = None if registry is None else tuple(_hex_list(inp, "runner_public_keys_hex"))
    verify_task(task, _get(inp, "scheduler_address"), keys)
    return {"task_id_hex": task.task_id.hex(), "signing_bytes_hex": task.signing_bytes().hex(),
            "runners": list(task.runners)}


def _ingest_result_record(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A runner's signed result as the aggregator checks it against its task and the registry.
    fields, registered = _get(inp, "result"), _get(inp, "registered")
    if not isinstance(registered, list):
        raise VectorFormatError("input 'registered' must be a list of addresses")
    result = IngestResult(
        task_id=_hex(fields, "task_id_hex"), stream_id=_get(fields, "stream_id"), tick=_get(fields, "tick"),
        runner=_get(fields, "runner"), result_json=_get(fields, "result_json"), error=_get(fields, "error"),
        detail=_get(fields, "detail"), signature=_hex(fields, "signature_hex"),
    )
    check_result(result, _task_of(_get(inp, "task")), frozenset(registered))
    return {"runner": result.runner, "signing_bytes_hex": result.signing_bytes().hex()}


def _ingest_batch_signature(inp: Mapping[str, Any]) -> dict[str, Any]:
    # A batch's one signature, over its domain and its body's exact bytes, checked before the body
    # is read: a task batch against the deployment's scheduler, a result batch against the registry.
    kind = _get(inp, "kind")
    batch = SignedBatch(_get(inp, "signer"), _hex(inp, "body_hex"), _hex(inp, "signature_hex"))
    if kind == "tasks":
        verify_task_batch(batch, _get(inp, "scheduler_address"))
    elif kind == "results":
        registered = _get(inp, "registered")
        if not isinstance(registered, list):
            raise VectorFormatError("input 'registered' must be a list of addresses")
        verify_result_batch(batch, frozenset(registered))
    else:
        raise VectorFormatError("input 'kind' must be 'tasks' or 'results'")
    return {"signer": batch.signer}


def _ingest_result(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The result's exact bytes are the UTF-8 of `result_text` (canonical JSON is what runners sign).
    text = _get(inp, "result_text")
    if not isinstance(text, str):
        raise VectorFormatError("input 'result_text' must be a string")
    schema = _get(inp, "result_schema")
    if not isinstance(schema, Mapping):
        raise VectorFormatError("input 'result_schema' must be an object")
    value = parse_result(text.encode("utf-8"))
    validate_result(value, schema)
    return {"value": value}


COMPUTATIONS: Final[Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "signing": _signing,
    "verify": _verify,
    "filter": _filter,
    "get_since": _get_since,
    "key_schedule": _key_schedule,
    "key_chain": _key_chain,
    "billing": _billing,
    "epoch_envelope": _epoch_envelope,
    "decrypt": _decrypt,
    "keyload_check": _keyload_check,
    "keyload_open": _keyload_open,
    "keyload_psk_open": _keyload_psk_open,
    "reseal_open": _reseal_open,
    "masked_payload": _masked_payload,
    "unmask": _unmask,
    "ingest_task_id": _ingest_task_id,
    "runner_registry": _runner_registry,
    "account_ledger": _account_ledger,
    "runner_selection": _runner_selection,
    "ingest_task": _ingest_task,
    "ingest_result_record": _ingest_result_record,
    "ingest_result": _ingest_result,
    "ingest_batch_signature": _ingest_batch_signature,
}


def compute(vector_type: str, inp: Mapping[str, Any]) -> dict[str, Any]:
    """The result for one vector input; raises the `WatchtowerError` the rules call for."""
    computation = COMPUTATIONS.get(vector_type)
    if computation is None:
        raise VectorFormatError(f"unknown vector type {vector_type!r}")
    if not isinstance(inp, Mapping):
        raise VectorFormatError("'input' must be an object")
    return computation(inp)


# --- Verdicts --------------------------------------------------------------------------------------


def _brief(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compare(expect: Mapping[str, Any], result: dict[str, Any]) -> str | None:
    problems = []
    for key in sorted(set(expect) | set(result)):
        if key not in result:
            problems.append(f"{key}: expected {_brief(expect[key])}, but the result has no such field")
        elif key not in expect:
            problems.append(f"{key}: result has {_brief(result[key])}, the vector expects no such field")
        elif not _same(expect[key], result[key]):
            problems.append(f"{key}: expected {_brief(expect[key])}, got {_brief(result[key])}")
    return "; ".join(problems) or None


def _same(a: object, b: object) -> bool:
    # JSON true is not 1, even though Python says True == 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def run_vector(vector: object) -> VectorOutcome:
    """Compute one vector and judge it against its expectation."""
    if not isinstance(vector, Mapping):
        return VectorOutcome("?", "?", False, "a vector must be an object")
    vector_id = str(vector.get("id", "?"))
    vector_type = str(vector.get("type", "?"))
    expect = vector.get("expect")
    if not isinstance(expect, Mapping) or not expect:
        return VectorOutcome(vector_id, vector_type, False, "malformed vector: 'expect' must be a non-empty object")
    expected_error = expect.get("error") if set(expect) == {"error"} else None
    try:
        result = compute(vector_type, vector.get("input"))  # type: ignore[arg-type]
    except VectorFormatError as exc:
        return VectorOutcome(vector_id, vector_type, False, f"malformed vector: {exc}")
    except WatchtowerError as exc:
        if expected_error is None:
            return VectorOutcome(
                vector_id, vector_type, False, f"expected a result, got error {exc.code}: {exc.message}"
            )
        if expected_error not in (ANY_ERROR, exc.code):
            return VectorOutcome(vector_id, vector_type, False, f"expected error {expected_error}, got {exc.code}")
        return VectorOutcome(vector_id, vector_type, True)
    except Exception as exc:  # a bug in our code must show up as a failing vector, not a crash
        return VectorOutcome(vector_id, vector_type, False, f"internal error {type(exc).__name__}: {exc}")
    if expected_error is not None:
        return VectorOutcome(
            vector_id, vector_type, False, f"expected error {expected_error}, got result {_brief(result)}"
        )
    problem = _compare(expect, result)
    return VectorOutcome(vector_id, vector_type, problem is None, problem)


def run_document(document: object) -> list[VectorOutcome]:
    """Run every vector of a parsed ``watchtower-vectors/1`` document, in order.

    Raises `VectorFormatError` when `document` is not such a document.
    """
    if not isinstance(document, Mapping):
        raise VectorFormatError("a vectors file holds a JSON object")
    if document.get("format") != VECTOR_FORMAT:
        raise VectorFormatError(f"format must be {VECTOR_FORMAT!r}, got {document.get('format')!r}")
    vectors = document.get("vectors")
    if not isinstance(vectors, list):
        raise VectorFormatError("'vectors' must be a list")
    return [run_vector(v) for v in vectors]
