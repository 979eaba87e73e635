"""The command bodies: one frozen class per method, read once from a signed command's body.

A signed command (`signed_command.Command`) carries its method's fields in a JSON body, signed
canonically; the rules read that body through the method's class here, never through string
keys. `read_body(cmd, cls)` checks the body has every required field and no unknown one
(INVALID_ARGUMENT naming them and the allowed ones, as `signed_command.body_fields` does), then
reads each field the body has, in the class's order, and returns the class with typed values.

Anyone may sign any JSON, so a field is typed by what reads it: ``Annotated[T, reader]``, where
the reader (`body_readers`) takes the signed value and the field's name and returns the `T` or
raises the error a client is told. A rule reads a body only after the checks that come first (an
owner-only method refuses a stranger before it reads the body), and a field the body leaves out
keeps its default, the one the rules give it; a field whose absence the rules tell from an explicit
null defaults to `ABSENT`.

A field typed `Any` is read by its rule, not here: the rule checks it later than the body's other
fields (after the state it depends on), or `peek_body` reads the class from a command already
decided, without judging it. Two methods carry documents with their own types rather than a flat
body: ``create_stream`` (a `config.StreamConfig`) and ``publish`` (a `message.StreamMessage`);
their rules parse those.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, TypeVar

from watchtower.protocol import body_readers as read
from watchtower.protocol.body_readers import Address, Amount, Count, Reader, Text
from watchtower.protocol.constants import MAX_MEMO
from watchtower.protocol.enums import DeliveryMode, SubscriptionPolicy
from watchtower.protocol.json_ints import MAX_SAFE_INT
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


T = TypeVar("T")
D = TypeVar("D")


def given(value: T | _Absent, default: D) -> T | D:
    """`value`, or `default` when the body left the field out."""
    return default if isinstance(value, _Absent) else value


def _key(name: str) -> str:
    # A JSON field named like a Python keyword is spelled with a trailing underscore here.
    return name[:-1] if name.endswith("_") else name


# --- stream methods ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Subscribe:
    """subscribe: a delivery mode, and optionally a filter, a start cursor and an account key id (the
    rule reads these after the filter, and the start cursor only when the subscription is new)."""

    mode: Annotated[DeliveryMode, read.delivery_mode]
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

    policy: Annotated[SubscriptionPolicy, read.subscription_policy]


@dataclasses.dataclass(frozen=True, slots=True)
class AllowlistChange:
    """allowlist_add and allowlist_remove: the address."""

    address: Address


@dataclasses.dataclass(frozen=True, slots=True)
class AnnounceKeyEpoch:
    """announce_key_epoch: the key epoch announced."""

    key_epoch: Count


@dataclasses.dataclass(frozen=True, slots=True)
class RenewSubscription:
    """renew_subscription: the target key epoch; who benefits and who pays default to the caller.
    The stream reads the account key id after it finds the caller's subscription, and the paid
    stream (which decides the purchase) who benefits and pays."""

    target_key_epoch: Count
    beneficiary_account: Any = ABSENT
    payer_account: Any = ABSENT
    account_key_id: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class AcquireEpochAccess:
    """acquire_epoch_access: the stream and target key epoch; who benefits and pays default to the
    caller (read by the paid stream's rule, as a renewal's are)."""

    target_key_epoch: Count
    stream_id: Any = None
    beneficiary_account: Any = ABSENT
    payer_account: Any = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class ReportIngestFailure:
    """report_ingest_failure: why and which ticks published nothing (the rule checks the reason is
    one of `IngestReason`, ``last_tick`` ≥ ``first_tick`` and the detail's length)."""

    reason: Text
    timestamp_unix_ms: Annotated[int, read.int_in(maximum=MAX_SAFE_INT)]
    first_tick: Annotated[int, read.int_in(minimum=1, maximum=MAX_SAFE_INT)]
    last_tick: Annotated[int, read.int_in(minimum=1, maximum=MAX_SAFE_INT)]
    detail: Annotated[str, read.text(allow_empty=True)]


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

    replay_id: Annotated[int, read.int_in(minimum=1)]


@dataclasses.dataclass(frozen=True, slots=True)
class SetReplayPrice:
    """set_replay_price: the per-event price in CBY wei."""

    price_per_event_cby: Count


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

    label: Text


@dataclasses.dataclass(frozen=True, slots=True)
class AdmitRunner:
    """register_runner by the deployment's registrar: the runner and its label."""

    runner: Address
    label: Text


@dataclasses.dataclass(frozen=True, slots=True)
class RetireRunner:
    """retire_runner by the runner itself: no fields."""


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveRunner:
    """retire_runner by the deployment's registrar: the runner."""

    runner: Address


# --- accounts and CBY ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterAccountKey:
    """register_account_key: the scheme and the X25519 public key."""

    scheme: Annotated[str, read.account_key_scheme]
    public_key: Annotated[bytes, read.x25519_public_key]


@dataclasses.dataclass(frozen=True, slots=True)
class RevokeAccountKey:
    """revoke_account_key: the key id."""

    account_key_id: Annotated[int, read.positive_id]


@dataclasses.dataclass(frozen=True, slots=True)
class ActorAuthorization:
    """authorize_actor and revoke_actor: the actor, and one stream or every stream (the rule checks
    the body names exactly one of them)."""

    actor: Address
    stream_id: Annotated[str | _Absent, read.text()] = ABSENT
    all_streams: Annotated[bool, read.flag] = False


@dataclasses.dataclass(frozen=True, slots=True)
class CreateActor:
    """create_actor: the actor the account created (CIP-7 actor.creator)."""

    actor: Address


@dataclasses.dataclass(frozen=True, slots=True)
class ApproveSpending:
    """approve_spending: who may spend, up to how much, on one stream (absent: any stream)."""

    spender: Address
    cap_cby: Amount
    stream_id: Annotated[str | _Absent, read.text()] = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class RevokeSpending:
    """revoke_spending: the spender, and the stream of its allowance (absent: the any-stream one)."""

    spender: Address
    stream_id: Annotated[str | _Absent, read.text()] = ABSENT


@dataclasses.dataclass(frozen=True, slots=True)
class TransferCby:
    """transfer_cby: the recipient, the amount and an optional memo."""

    to: Address
    amount_cby: Amount
    memo: Annotated[str, read.short_text(MAX_MEMO)] = ""


@dataclasses.dataclass(frozen=True, slots=True)
class BurnCby:
    """burn_cby: the amount."""

    amount_cby: Amount


@dataclasses.dataclass(frozen=True, slots=True)
class MintCby:
    """mint_cby (the genesis minter's): the recipient and the amount."""

    to: Address
    amount_cby: Amount


# --- the Stream Key Manager's signed requests ----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class StreamEncrypt:
    """stream_encrypt: the key epoch, the AAD and the plaintext."""

    key_epoch: Count
    aad: Annotated[bytes, read.raw_bytes]
    plaintext: Annotated[bytes, read.raw_bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDecrypt:
    """stream_decrypt: the account decrypting for, the key epoch, the AAD and the envelope."""

    beneficiary_account: Address
    key_epoch: Count
    aad: Annotated[bytes, read.raw_bytes]
    envelope: Annotated[bytes, read.raw_bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class EpochKeys:
    """epoch_keys: the account, the key epoch range and optionally the account key to seal to."""

    account: Address
    from_key_epoch: Count
    to_key_epoch: Count
    account_key_id: Annotated[int | None, read.nullable(read.int_in())] = None


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

_Shape = tuple[frozenset[str], frozenset[str], tuple[tuple[str, str, Reader | None], ...]]
_SHAPES: dict[type, _Shape] = {}


def _reader(hint: Any) -> Reader | None:
    # The reader of an ``Annotated[T, reader]`` field; None for a field its rule reads.
    return hint.__metadata__[0] if typing.get_origin(hint) is Annotated else None


def _shape(cls: type) -> _Shape:
    # (required keys, optional keys, (attribute, key, reader) triples), computed once per class.
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        hints = typing.get_type_hints(cls, include_extras=True)
        required = frozenset(_key(f.name) for f in fields if f.default is dataclasses.MISSING)
        optional = frozenset(_key(f.name) for f in fields if f.default is not dataclasses.MISSING)
        names = tuple((f.name, _key(f.name), _reader(hints[f.name])) for f in fields)
        shape = _SHAPES[cls] = (required, optional, names)
    return shape


def read_body(cmd: Command, cls: type[B]) -> B:
    """The body of `cmd` as `cls`: INVALID_ARGUMENT for a missing required or an unknown field, and
    each field's reader's error for a value it refuses (the fields are read in the class's order)."""
    required, optional, names = _shape(cls)
    body: Mapping[str, Any] = body_fields(cmd, required, optional)
    return cls(**{attr: body[key] if reader is None else reader(body[key], key)
                  for attr, key, reader in names if key in body})


def peek_body(cmd: Command, cls: type[B]) -> B:
    """The fields `cls` names of a command already decided, read without judging the body: unknown
    fields are ignored and a missing required one is None. For verifiers of a signed command carried
    in a record (a key chain, a replay registration), whose own rules say what a mismatch is; only
    for a class whose fields are all read by their rules (typed `Any`)."""
    required, _optional, names = _shape(cls)
    if any(reader is not None for _attr, _key, reader in names):
        raise TypeError(f"{cls.__name__} has typed fields; peek_body reads only untyped ones")
    body = cmd.body
    values = {attr: body[key] for attr, key, _reader in names if key in body}
    values.update({attr: None for attr, key, _reader in names if key in required and key not in body})
    return cls(**values)
