"""The JSON records: commands, internal forwards and replies, each defined once here.

These are request/reply traffic between the SDK and the workers (not the archive an outside reader
replays), so they stay JSON, readable with any client, and are decoded with msgspec against these
definitions (a typed decode, several times faster than ``json.loads`` plus hand checks).
`tests/schemas/test_envelopes.py` proves that the encoders write exactly these fields and that
`SignedCommandJson` is `Command.to_dict()` field for field.

- commands topic: ``{"v": 1, "command": SignedCommandJson}``
- internal topic: ``{"v": 1, "register_feed": SignedCommandJson}`` (a stream's writer forwards the
  signed create_stream to the registry), or ``{"v": 1, "keymgr": KeymgrForwardJson}`` (one of the
  key manager's forwards, tagged by ``kind``; docs/ledger.md, including the ICRC-77 replay
  charge to the requester's account and its settlement back to the stream, and the replay
  worker's ``replay_finished`` to the stream)
- replies topic: ``{"v": 1, "ok": true, "result": {...}}`` or ``{"v": 1, "ok": false, "error": ErrorJson}``
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

WIRE_VERSION: Final = 1


class SignedCommandJson(msgspec.Struct, forbid_unknown_fields=True):
    """A signed command (`protocol.signed_command.Command.to_dict()`): bytes as hex, body bytes as
    ``{"$bytes": hex}``."""

    method: str
    stream_id: str
    caller_public_key_hex: str
    nonce: int
    body: dict[str, Any]
    signature_hex: str


class ErrorJson(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A refusal: the spec's error code, a message saying what to do, optional details."""

    code: str
    message: str
    details: dict[str, Any] | None = None


class OriginJson(msgspec.Struct, forbid_unknown_fields=True):
    """The signed command a key-manager forward descends from (`protocol.ledger.Origin`)."""

    caller: str
    nonce: int
    digest_hex: str


class CreditJson(msgspec.Struct, tag="credit", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.CbyCredit`, to ``acct:<account>``."""

    account: str
    amount_cby: int
    reason: str
    ref: str
    counterparty: str
    origin: OriginJson


class PurchaseDebitJson(msgspec.Struct, tag="purchase_debit", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.PurchaseDebit`, to ``acct:<payer>``."""

    purchase_id: str
    stream_id: str
    payer: str
    beneficiary: str
    publisher_treasury: str
    protocol_treasury: str
    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int
    origin: OriginJson


class PurchaseSettledJson(msgspec.Struct, tag="purchase_settled", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.PurchaseSettled`, to ``paid:<stream_id>``; `error` None: paid."""

    purchase_id: str
    stream_id: str
    beneficiary: str
    error: ErrorJson | None
    origin: OriginJson


class BurnJson(msgspec.Struct, tag="burn", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.CbyBurn`, to ``cby:supply``."""

    account: str
    amount_cby: int
    origin: OriginJson


class PaidCommandJson(msgspec.Struct, tag="paid_command", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.PaidCommand`: a signed create_stream or renew_subscription, to ``paid:<stream_id>``."""

    command: SignedCommandJson


class ReplayChargeJson(msgspec.Struct, tag="replay_charge", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.ReplayCharge`, to ``acct:<requester>``."""

    replay_id: int
    stream_id: str
    requester: str
    owner: str
    price_cby: int
    origin: OriginJson
    command: SignedCommandJson | None = None


class ReplaySettledJson(msgspec.Struct, tag="replay_settled", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.ReplaySettled`, to the stream ``stream_id``; `error` None: paid."""

    replay_id: int
    stream_id: str
    requester: str
    error: ErrorJson | None
    origin: OriginJson
    command: SignedCommandJson | None = None


class ReplayFinishedJson(msgspec.Struct, tag="replay_finished", tag_field="kind", forbid_unknown_fields=True):
    """`protocol.ledger.ReplayFinished`, from the replay worker to the stream ``stream_id``."""

    replay_id: int
    stream_id: str
    requester: str
    outcome: str
    origin: OriginJson


KeymgrForwardJson = (CreditJson | PurchaseDebitJson | PurchaseSettledJson | BurnJson | PaidCommandJson
                     | ReplayChargeJson | ReplaySettledJson | ReplayFinishedJson)


class CommandRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A record on the commands or internal topic: exactly one of `command` / `register_feed` /
    `keymgr`."""

    v: int
    command: SignedCommandJson | None = None
    register_feed: SignedCommandJson | None = None
    keymgr: KeymgrForwardJson | None = None


class ReplyRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A record on the replies topic: `result` when ok, `error` otherwise."""

    v: int
    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorJson | None = None


class VersionProbe(msgspec.Struct):
    """Just the envelope version, read when a record does not fit its definition (so an unknown
    version is reported as SCHEMA_MISMATCH rather than as a malformed record)."""

    v: Any = msgspec.UNSET


COMMAND_DECODER: Final = msgspec.json.Decoder(CommandRecord)
REPLY_DECODER: Final = msgspec.json.Decoder(ReplyRecord)
PROBE_DECODER: Final = msgspec.json.Decoder(VersionProbe)
ENCODER: Final = msgspec.json.Encoder()
