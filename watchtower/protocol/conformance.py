"""Run conformance vectors (format ``watchtower-vectors/1``, DESIGN §7.9) with the project's code.

Every result is computed from the vector's `input` by the same functions the services use, then
compared with `expect`: a dict of result fields (which must match exactly: same keys, same
values), or ``{"error": CODE}`` where ``"*"`` accepts any Watchtower error. A vector whose
expectation is wrong therefore fails, as does a vector this checker cannot read.

Besides the shared types, the project's own files in ``vectors/`` use ``key_chain``
(docs/key-chain.md) and ``account_ledger`` (docs/ledger.md: signed account commands and purchases
run through the key manager's instances, `ledger_run`), computed here; the private-feed types
(``keyload_check``, ``keyload_open``, ``keyload_psk_open``, ``reseal_open``, ``masked_payload``,
``unmask``: docs/private-feeds.md) are computed in `confidential.vectors`, and the ingestion types
(``ingest_task_id``, ``runner_registry``, ``runner_selection``, ``ingest_task``,
``ingest_result_record``, ``ingest_result``, ``ingest_batch_signature``: docs/ingestion.md) in
`ingestion.vectors`. A type this checker does not know fails its vector.

Pure: callers read the files and hand over the parsed JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.confidential import vectors as private_feed_vectors
from watchtower.protocol.confidential.envelope import (
    decrypt_for_epoch,
    derive_content_key,
    derive_nonce,
    encrypt_for_epoch,
    envelope_aad,
)
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import AccessMode, parse_access_mode
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import vectors as ingestion_vectors
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
from watchtower.protocol.vector_input import Computation, VectorFormatError, field, hex_field

VECTOR_FORMAT: Final = "watchtower-vectors/1"
ANY_ERROR: Final = "*"


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


# --- One computation per vector type ---------------------------------------------------------------


def _signing(inp: Mapping[str, Any]) -> dict[str, Any]:
    key = signing_key_from_seed(hex_field(inp, "signer_seed_hex"))
    msg = sign_message(
        stream_id=field(inp, "stream_id"),
        version=field(inp, "version"),
        sequence=field(inp, "sequence"),
        timestamp_unix_ms=field(inp, "timestamp_unix_ms"),
        kind=field(inp, "kind"),
        content_type=field(inp, "content_type"),
        tags=field(inp, "tags"),
        payload_format=field(inp, "payload_format"),
        key_epoch=field(inp, "key_epoch"),
        signing_key_id=field(inp, "signing_key_id"),
        payload=hex_field(inp, "payload_hex"),
        signing_key=key,
    )
    return {
        "payload_hash_hex": msg.payload_hash.hex(),
        "signing_bytes_hex": message_signing_bytes(msg).hex(),
        "public_key_hex": public_key_of(key).hex(),
        "publisher_sig_hex": msg.publisher_sig.hex(),
    }


def _verify(inp: Mapping[str, Any]) -> dict[str, Any]:
    fields = field(inp, "message")
    msg = StreamMessage(
        stream_id=field(fields, "stream_id"),
        version=field(fields, "version"),
        sequence=field(fields, "sequence"),
        timestamp_unix_ms=field(fields, "timestamp_unix_ms"),
        kind=field(fields, "kind"),
        content_type=field(fields, "content_type"),
        tags=field(fields, "tags"),
        payload_format=field(fields, "payload_format"),
        key_epoch=field(fields, "key_epoch"),
        signing_key_id=field(fields, "signing_key_id"),
        payload_inline=hex_field(fields, "payload_hex"),
        payload_hash=hex_field(fields, "payload_hash_hex"),
        publisher_sig=hex_field(fields, "publisher_sig_hex"),
    )
    return {"valid": verify_message(msg, hex_field(inp, "public_key_hex"))}


def _filter(inp: Mapping[str, Any]) -> dict[str, Any]:
    node = parse_filter(field(inp, "filter"))
    return {"match": evaluate(node, field(inp, "headers"))}


def _get_since(inp: Mapping[str, Any]) -> dict[str, Any]:
    sequences = get_since_range(
        field(inp, "head"), field(inp, "ring_buffer_capacity"), field(inp, "cursor"), field(inp, "limit")
    )
    return {"sequences": list(sequences)}


def _key_schedule(inp: Mapping[str, Any]) -> dict[str, Any]:
    # The vectors name no keys, only ids; distinct stand-in keys per id are enough.
    def stand_in_key(key_id: int) -> bytes:
        return hashlib.sha256(f"conformance-key-{key_id}".encode()).digest()

    schedule = KeySchedule.initial(stand_in_key(1))
    head = 0
    ops = field(inp, "ops")
    if not isinstance(ops, list):
        raise VectorFormatError("input 'ops' must be a list")
    for op in ops:
        name = field(op, "op")
        if name == "publish":
            count = field(op, "count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise VectorFormatError("a publish op needs a non-negative integer 'count'")
            head += count
        elif name == "rotate":
            schedule = schedule.rotate(stand_in_key(schedule.current.signing_key_id + 1), head_sequence=head)
        else:
            raise VectorFormatError(f"unknown key_schedule op {name!r}")
    resolutions = []
    for sequence in field(inp, "queries"):
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
    schedule = verify_key_chain(field(inp, "stream_id"), key_chain_from_json(field(inp, "chain")), expected)
    return {
        "owner": key_chain_owner(schedule),
        "entries": [
            {"signing_key_id": e.signing_key_id, "publisher_key": e.public_key.hex(),
             "effective_sequence": e.effective_sequence}
            for e in schedule.entries
        ],
    }


def _billing(inp: Mapping[str, Any]) -> dict[str, Any]:
    mode = parse_access_mode(field(inp, "access_mode"))
    pricing = None
    if mode is AccessMode.PLATFORM_MANAGED:
        pricing = EpochPricing(
            field(inp, "fee_per_key_epoch_cby"),
            field(inp, "protocol_fee_bps"),
            field(inp, "min_purchase_epochs"),
        )
    decision = acquire_epoch_access(
        access_mode=mode,
        pricing=pricing,
        current_key_epoch=field(inp, "current_key_epoch"),
        target_key_epoch=field(inp, "target_key_epoch"),
        active_until_key_epoch=field(inp, "active_until_key_epoch"),
        payer_balance_cby=field(inp, "payer_balance_cby"),
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
    seed = hex_field(inp, "master_seed_hex")
    stream_id, key_epoch, actor_nonce = (
        field(inp, "stream_id"),
        field(inp, "key_epoch"),
        field(inp, "actor_nonce"),
    )
    sequence, kind, content_type = field(inp, "sequence"), field(inp, "kind"), field(inp, "content_type")
    envelope = encrypt_for_epoch(
        master_seed=seed,
        stream_id=stream_id,
        key_epoch=key_epoch,
        actor_nonce=actor_nonce,
        sequence=sequence,
        kind=kind,
        content_type=content_type,
        plaintext=hex_field(inp, "plaintext_hex"),
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
        master_seed=hex_field(inp, "master_seed_hex"),
        stream_id=field(inp, "stream_id"),
        key_epoch=field(inp, "key_epoch"),
        sequence=field(inp, "sequence"),
        kind=field(inp, "kind"),
        content_type=field(inp, "content_type"),
        envelope=hex_field(inp, "envelope_hex"),
    )
    return {"plaintext_hex": plaintext.hex()}


def _account_ledger(inp: Mapping[str, Any]) -> dict[str, Any]:
    # Signed commands (and paid streams' registrations) decided in order by the key manager's
    # instances at one block height; each step's answer, then the state the checks ask about.
    deployment = field(inp, "deployment")
    run = LedgerRun(Deployment(protocol_treasury=field(deployment, "protocol_treasury"),
                               cby_minter=field(deployment, "cby_minter")), field(inp, "block_height"))
    steps = field(inp, "steps")
    if not isinstance(steps, list):
        raise VectorFormatError("input 'steps' must be a list")
    answers: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, Mapping) and "paid_command" in step:
            create = Command.from_dict(step["paid_command"])
            answer = run.send(PaidCommand(create), PAID_PREFIX + create.stream_id)
        else:
            answer = run.send(Command.from_dict(field(step, "command")))
        answers.append(answer["result"] if answer["ok"] else {"error": answer["error"].code})
    checks = field(inp, "checks")
    allowances = []
    for q in field(checks, "allowances"):
        found = run.account(field(q, "account")).allowance(field(q, "spender"), field(q, "stream_id"))
        allowances.append(None if found is None else found.to_dict())
    return {
        "answers": answers,
        "balances": {a: str(run.account(a).balance_cby) for a in field(checks, "balances")},
        "actor_authorized": [run.account(field(q, "account")).actor_authorized(field(q, "actor"), field(q, "stream_id"))
                             for q in field(checks, "actor_authorized")],
        "allowances": allowances,
        "entitlements": [run.active_until(field(q, "stream_id"), field(q, "account"))
                         for q in field(checks, "entitlements")],
    }


COMPUTATIONS: Final[Mapping[str, Computation]] = {
    "signing": _signing,
    "verify": _verify,
    "filter": _filter,
    "get_since": _get_since,
    "key_schedule": _key_schedule,
    "key_chain": _key_chain,
    "billing": _billing,
    "epoch_envelope": _epoch_envelope,
    "decrypt": _decrypt,
    "account_ledger": _account_ledger,
    **private_feed_vectors.COMPUTATIONS,
    **ingestion_vectors.COMPUTATIONS,
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
