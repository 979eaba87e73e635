"""The command bodies: one frozen class per method, read once from a signed command's body.

A signed command (`signed_command.Command`) carries its method's fields in a JSON body, signed
canonically; the rules read that body through the method's class here, never through string
keys. `read_body(cmd, cls)` checks the body has every required field and no unknown one
(INVALID_ARGUMENT naming them and the allowed ones, as `signed_command.body_fields` does) and
returns the class with the body's values.

The values are what the signer sent, so they are typed `Any`: anyone may sign any JSON, and each
value is validated by the rule that uses it (`require_int`, `require_address`, ...), in the order
the rules check things (an owner-only method refuses a stranger before it reads the body). A field
the body may leave out has the default the rules give it; a field whose absence the rules tell
from an explicit null defaults to `ABSENT`.

Two methods carry documents with their own types rather than a flat body: ``create_stream`` (a
`config.StreamConfig`) and ``publish`` (a `message.StreamMessage`); their rules parse those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Final, TypeVar

from watchtower.protocol.signed_command import Command, body_fields


class _Absent:
    """The value of an optional field the body left out (falsy; one instance)."""

    _instance: ClassVar[_Absent | None] = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""An optional field's value when the body leaves it out (where the rules tell that from null)."""


def given(value: Any, default: Any) -> Any:
    """`value`, or `default` when the body left the field out."""
    return default if value is ABSENT else value


def _key(name: str) -> str:
    # A JSON field named like a Python keyword is spelled with a trailing underscore here.
    return name[:-1] if name.endswith("_") else name


# --- stream methods ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Subscribe:
    """subscribe: a delivery mode, and optionally a filter, a start cursor and an account key id."""

    mode: Any
    filter: Any = None
    start_cursor: Any = None
    account_key_id: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class Unsubscribe:
    """unsubscribe: no fields."""


@dataclasses.dataclass(frozen=True, slots=True)
class RotatePublisherKey:
    """rotate_publisher_key: the new key, and optionally where it goes in the key chain."""

    new_key: Any
    signing_key_id: Any = None
    effective_sequence: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class SetSubscriptionPolicy:
    """set_subscription_policy: PUBLIC or PRIVATE_ALLOWLIST."""

    policy: Any


@dataclasses.dataclass(frozen=True, slots=True)
class AllowlistChange:
    """allowlist_add and allowlist_remove: the address."""

    address: Any


@dataclasses.dataclass(frozen=True, slots=True)
class AnnounceKeyEpoch:
    """announce_key_epoch: the key epoch announced."""

    key_epoch: Any


@dataclasses.dataclass(frozen=True, slots=True)
class RenewSubscription:
    """renew_subscription: the target key epoch; who benefits and who pays default to the caller."""

    target_key_epoch: Any
    beneficiary_account: Any = ABSENT
    payer_account: Any = ABSENT
    account_key_id: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class AcquireEpochAccess:
    """acquire_epoch_access: the stream and target key epoch; who benefits and pays default to the caller."""

    target_key_epoch: Any
    stream_id: Any = None
    beneficiary_account: Any = ABSENT
    payer_account: Any = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class ReportIngestFailure:
    """report_ingest_failure: why and which ticks published nothing."""

    reason: Any
    timestamp_unix_ms: Any
    first_tick: Any
    last_tick: Any
    detail: Any


# --- replay methods (ICRC-77) --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterReplay:
    """register_replay: the namespace, the range [from, to) and optionally a config and a memo."""

    namespace: Any
    from_: Any
    to: Any = None
    config: Any = None
    memo_hex: Any = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CancelReplay:
    """cancel_replay: the replay id."""

    replay_id: Any


@dataclasses.dataclass(frozen=True, slots=True)
class SetReplayPrice:
    """set_replay_price: the per-event price in CBY wei."""

    price_per_event_cby: Any


@dataclasses.dataclass(frozen=True, slots=True)
class CreateStreamKeys:
    """What a key chain reads of a create_stream's body (a `StreamConfig` document): the first
    publisher key, as bytes or hex, and the owner it declares."""

    publisher_key: Any = None
    publisher_key_hex: Any = None
    owner: Any = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class FeedListing:
    """What the registry reads of a create_stream's body: its ``feed`` listing, if any."""

    feed: Any = None


# --- the ingestion runner registry ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterRunner:
    """register_runner by the runner itself: its label."""

    label: Any


@dataclasses.dataclass(frozen=True, slots=True)
class AdmitRunner:
    """register_runner by the deployment's registrar: the runner and its label."""

    label: Any
    runner: Any


@dataclasses.dataclass(frozen=True, slots=True)
class RetireRunner:
    """retire_runner by the runner itself: no fields."""


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveRunner:
    """retire_runner by the deployment's registrar: the runner."""

    runner: Any


# --- accounts and CBY ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterAccountKey:
    """register_account_key: the scheme and the X25519 public key."""

    scheme: Any
    public_key: Any


@dataclasses.dataclass(frozen=True, slots=True)
class RevokeAccountKey:
    """revoke_account_key: the key id."""

    account_key_id: Any


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorization:
    """authorize_actor and revoke_actor: the actor, and one stream or every stream."""

    actor: Any
    stream_id: Any = ABSENT
    all_streams: Any = False


@dataclasses.dataclass(frozen=True, slots=True)
class CreateActor:
    """create_actor: the actor the account created (CIP-7 actor.creator)."""

    actor: Any


@dataclasses.dataclass(frozen=True, slots=True)
class ApproveSpending:
    """approve_spending: who may spend, up to how much, on one stream (absent: any stream)."""

    spender: Any
    cap_cby: Any
    stream_id: Any = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class RevokeSpending:
    """revoke_spending: the spender, and the stream of its allowance (absent: the any-stream one)."""

    spender: Any
    stream_id: Any = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class TransferCby:
    """transfer_cby: the recipient, the amount and an optional memo."""

    to: Any
    amount_cby: Any
    memo: Any = ""


@dataclasses.dataclass(frozen=True, slots=True)
class BurnCby:
    """burn_cby: the amount."""

    amount_cby: Any


@dataclasses.dataclass(frozen=True, slots=True)
class MintCby:
    """mint_cby (the genesis minter's): the recipient and the amount."""

    to: Any
    amount_cby: Any


# --- the Stream Key Manager's signed requests ----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class StreamEncrypt:
    """stream_encrypt: the key epoch, the AAD and the plaintext."""

    key_epoch: Any
    aad: Any
    plaintext: Any


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDecrypt:
    """stream_decrypt: the account decrypting for, the key epoch, the AAD and the envelope."""

    beneficiary_account: Any
    key_epoch: Any
    aad: Any
    envelope: Any


@dataclasses.dataclass(frozen=True, slots=True)
class EpochKeys:
    """epoch_keys: the account, the key epoch range and optionally the account key to seal to."""

    account: Any
    from_key_epoch: Any
    to_key_epoch: Any
    account_key_id: Any = None


def claimed_namespace(cmd: Command) -> Any:
    """The namespace a register_replay names, read before its body is checked (None when it names
    none): who may replay is decided first, so a stranger learns nothing from a body's errors."""
    return cmd.body.get("namespace")


def split_publish(cmd: Command, receipt_field: str) -> tuple[Mapping[str, Any], Any]:
    """A publish body's message fields (the `StreamMessage` document) and the key manager's receipt
    riding beside them under `receipt_field` (None when the body has none)."""
    body = cmd.body
    if receipt_field not in body:
        return body, None
    return {k: v for k, v in body.items() if k != receipt_field}, body[receipt_field]


B = TypeVar("B")

_SHAPES: dict[type, tuple[frozenset[str], frozenset[str], tuple[tuple[str, str], ...]]] = {}


def _shape(cls: type) -> tuple[frozenset[str], frozenset[str], tuple[tuple[str, str], ...]]:
    # (required keys, optional keys, (attribute, key) pairs), computed once per class.
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        required = frozenset(_key(f.name) for f in fields if f.default is dataclasses.MISSING)
        optional = frozenset(_key(f.name) for f in fields if f.default is not dataclasses.MISSING)
        shape = _SHAPES[cls] = (required, optional, tuple((f.name, _key(f.name)) for f in fields))
    return shape


def read_body(cmd: Command, cls: type[B]) -> B:
    """The body of `cmd` as `cls`: INVALID_ARGUMENT for a missing required or an unknown field."""
    required, optional, names = _shape(cls)
    body: Mapping[str, Any] = body_fields(cmd, required, optional)
    return cls(**{attr: body[key] for attr, key in names if key in body})


def peek_body(cmd: Command, cls: type[B]) -> B:
    """The fields `cls` names of a command already decided, read without judging the body: unknown
    fields are ignored and a missing required one is None. For verifiers of a signed command carried
    in a record (a key chain, a replay registration), whose own rules say what a mismatch is."""
    required, _optional, names = _shape(cls)
    body = cmd.body
    values = {attr: body[key] for attr, key in names if key in body}
    values.update({attr: None for attr, key in names if key in required and key not in body})
    return cls(**values)
