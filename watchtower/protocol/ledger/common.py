"""What the Stream Key Manager's aggregates share: instance keys, amounts, forwards, replay rules.

Three kinds of aggregate instance hold the key manager's write-side state (docs/ledger.md):

- ``acct:<address>`` (`accounts`): one account's CBY balance, account keys and actor authorizations;
- ``paid:<stream_id>`` (`paid_stream`): one paid stream's config, entitlements and purchases in flight;
- ``cby:supply`` (`supply`): the total CBY supply.

A signed command names its instance in its envelope ``stream_id``. Instances talk to each other
only through *forwards* (the dataclasses below), which the host writes on ``internal`` in the same
Kafka transaction as the events that caused them and which the receiver consumes in the
transaction that applies them: every forward takes effect exactly once, so the ledger needs no
dedupe set. A forward carries the `Origin` of the command that started it, so the events it causes
name that command (caller, nonce, digest) like every other event.

Amounts are CBY wei, ints in 1..2**63-1 (a bool is not an int). The total supply never exceeds
2**63-1 either, and every balance is part of it, so no balance or credit can overflow an Avro long.

Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from watchtower.protocol.addresses import require_address
from watchtower.protocol.command_auth import check_nonce, nonce_ceiling
from watchtower.protocol.constants import MAX_WIRE_UINT64
from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, WatchtowerError
from watchtower.protocol.events import EventBody
from watchtower.protocol.replay.fold import REPLAY_OUTCOMES
from watchtower.protocol.signed_command import Command, Method, command_digest
from watchtower.protocol.stream.state import CallerRecord, Event, FrozenMap
from watchtower.protocol.validation import require_amount

ACCOUNT_PREFIX: Final = "acct:"
PAID_PREFIX: Final = "paid:"
SUPPLY_KEY: Final = "cby:supply"

MAX_CBY: Final = MAX_WIRE_UINT64
"""The largest amount, balance or total supply (2**63-1 wei: an Avro long)."""

ACCOUNT_METHODS: Final = frozenset(
    {
        Method.REGISTER_ACCOUNT_KEY,
        Method.REVOKE_ACCOUNT_KEY,
        Method.AUTHORIZE_ACTOR,
        Method.REVOKE_ACTOR,
        Method.CREATE_ACTOR,
        Method.APPROVE_SPENDING,
        Method.REVOKE_SPENDING,
        Method.TRANSFER_CBY,
        Method.BURN_CBY,
    }
)
PAID_METHODS: Final = frozenset({Method.ACQUIRE_EPOCH_ACCESS})
SUPPLY_METHODS: Final = frozenset({Method.MINT_CBY})
SERVICE_METHODS: Final = frozenset({Method.STREAM_ENCRYPT, Method.STREAM_DECRYPT, Method.FETCH_EPOCH_KEYS})
"""Request signatures the key-manager service checks; never decided on Kafka."""
KEYMGR_METHODS: Final = ACCOUNT_METHODS | PAID_METHODS | SUPPLY_METHODS | SERVICE_METHODS
STREAM_METHODS: Final = frozenset(Method) - KEYMGR_METHODS
REPLAY_METHODS: Final = frozenset({Method.REGISTER_REPLAY, Method.CANCEL_REPLAY, Method.SET_REPLAY_PRICE})
"""ICRC-77 replay control: stream methods, decided by the stream aggregate (`replay_control`)."""
if not REPLAY_METHODS <= STREAM_METHODS:  # pragma: no cover
    raise RuntimeError("the replay methods must be stream methods")

CREDIT_REASONS: Final = frozenset({"mint", "transfer", "publisher_revenue", "protocol_fee", "replay"})
DEBIT_REASONS: Final = frozenset({"transfer", "purchase", "burn", "replay"})


def account_instance(address: str) -> str:
    """The instance key of an account."""
    return ACCOUNT_PREFIX + address


def paid_instance(stream_id: str) -> str:
    """The instance key of a paid stream."""
    return PAID_PREFIX + stream_id


# --- Forwards ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Origin:
    """The signed command a forward descends from: its events carry these as caller, nonce, digest."""

    caller: str
    nonce: int
    digest: bytes

    def __post_init__(self) -> None:
        require_address(self.caller, "origin.caller")
        if type(self.nonce) is not int or not 1 <= self.nonce <= MAX_WIRE_UINT64:
            raise InvalidArgumentError("origin.nonce must be a positive 64-bit integer")
        if not isinstance(self.digest, bytes) or len(self.digest) != 32:
            raise InvalidArgumentError("origin.digest must be a 32-byte SHA-256")

    @classmethod
    def of(cls, cmd: Command) -> Origin:
        """The origin of a signed command."""
        return cls(cmd.caller, cmd.nonce, command_digest(cmd))


@dataclasses.dataclass(frozen=True, slots=True)
class CbyCredit:
    """To ``acct:<account>``: credit `amount_cby` (from a mint, a transfer or a purchase)."""

    account: str
    amount_cby: int
    reason: str
    ref: str
    counterparty: str
    origin: Origin

    def __post_init__(self) -> None:
        require_address(self.account, "account")
        require_amount(self.amount_cby)
        if self.reason not in CREDIT_REASONS:
            raise InvalidArgumentError(f"credit reason must be one of {sorted(CREDIT_REASONS)}")


@dataclasses.dataclass(frozen=True, slots=True)
class PurchaseDebit:
    """To ``acct:<payer>``: pay for purchase `purchase_id` on `stream_id`, or answer that it cannot."""

    purchase_id: str
    stream_id: str
    payer: str
    beneficiary: str
    publisher_treasury: str
    protocol_treasury: str
    publisher_amount_cby: int
    protocol_fee_cby: int
    total_amount_cby: int
    origin: Origin

    def __post_init__(self) -> None:
        for name in ("payer", "beneficiary", "publisher_treasury", "protocol_treasury"):
            require_address(getattr(self, name), name)
        require_amount(self.total_amount_cby, "total_amount_cby")
        for name in ("publisher_amount_cby", "protocol_fee_cby"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidArgumentError(f"{name} must be a non-negative integer")
        if self.publisher_amount_cby + self.protocol_fee_cby != self.total_amount_cby:
            raise InvalidArgumentError("publisher_amount_cby + protocol_fee_cby must equal total_amount_cby")


@dataclasses.dataclass(frozen=True, slots=True)
class PurchaseSettled:
    """To ``paid:<stream_id>``: the payer's account paid (`error` None) or refused with `error`."""

    purchase_id: str
    stream_id: str
    beneficiary: str
    error: Mapping[str, Any] | None
    origin: Origin


@dataclasses.dataclass(frozen=True, slots=True)
class CbyBurn:
    """To ``cby:supply``: `account` destroyed `amount_cby` (already debited there)."""

    account: str
    amount_cby: int
    origin: Origin

    def __post_init__(self) -> None:
        require_address(self.account, "account")
        require_amount(self.amount_cby)


@dataclasses.dataclass(frozen=True, slots=True)
class PaidCommand:
    """To ``paid:<stream_id>``: a signed create_stream of a PLATFORM_MANAGED stream (to register
    it) or a renew_subscription (to decide as a purchase), forwarded by the stream's writer."""

    command: Command


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayCharge:
    """To ``acct:<requester>``: pay `price_cby` to the stream `owner` for replay `replay_id` of
    `stream_id` (a priced register_replay), or answer that it cannot (`ReplaySettled`)."""

    replay_id: int
    stream_id: str
    requester: str
    owner: str
    price_cby: int
    origin: Origin
    #: The requester's signed register_replay, carried to the ``registered`` replay record.
    command: Command | None = None

    def __post_init__(self) -> None:
        _require_replay_id(self.replay_id)
        require_address(self.requester, "requester")
        require_address(self.owner, "owner")
        require_amount(self.price_cby, "price_cby")
        if not isinstance(self.stream_id, str) or not self.stream_id:
            raise InvalidArgumentError("stream_id must be a non-empty text")


@dataclasses.dataclass(frozen=True, slots=True)
class ReplaySettled:
    """To the stream `stream_id`: the requester's account paid replay `replay_id` (`error` None) or
    refused it with `error` (e.g. INSUFFICIENT_CBY_BALANCE). Accepted from ``internal`` only."""

    replay_id: int
    stream_id: str
    requester: str
    error: Mapping[str, Any] | None
    origin: Origin
    #: The requester's signed register_replay (from the ReplayCharge), carried to the replay record.
    command: Command | None = None

    def __post_init__(self) -> None:
        _require_replay_id(self.replay_id)
        require_address(self.requester, "requester")
        if not isinstance(self.stream_id, str) or not self.stream_id:
            raise InvalidArgumentError("stream_id must be a non-empty text")


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFinished:
    """To the stream `stream_id`: the replay worker fulfilled replay `replay_id` to its end
    (`outcome`, one of `replay_fold.REPLAY_OUTCOMES`; ICRC-77 icrc77_replay_status), written in the transaction
    of the replay's terminal record. `origin` is the requester's register_replay (the replay id
    derives from its digest). Accepted from ``internal`` only."""

    replay_id: int
    stream_id: str
    requester: str
    outcome: str
    origin: Origin

    def __post_init__(self) -> None:
        _require_replay_id(self.replay_id)
        require_address(self.requester, "requester")
        if not isinstance(self.stream_id, str) or not self.stream_id:
            raise InvalidArgumentError("stream_id must be a non-empty text")
        if self.outcome not in REPLAY_OUTCOMES:
            raise InvalidArgumentError(f"outcome must be one of {', '.join(REPLAY_OUTCOMES)}, got {self.outcome!r}")


def _require_replay_id(value: object) -> None:
    if type(value) is not int or not 1 <= value <= MAX_WIRE_UINT64:
        raise InvalidArgumentError(f"replay_id must be a positive 63-bit integer, got {value!r}")


KeymgrForward = CbyCredit | PurchaseDebit | PurchaseSettled | CbyBurn | PaidCommand | ReplayCharge | ReplaySettled


class Routed(NamedTuple):
    """A forward and the instance it goes to. `answers`: the receiver answers the caller (the
    host passes the caller's reply headers along only then)."""

    key: str
    forward: KeymgrForward
    answers: bool


class LedgerDecision(NamedTuple):
    """A key-manager decision: events, the reply (None: a forward's receiver answers), forwards,
    and an error the caller gets although the events are committed (a failed purchase)."""

    events: tuple[Event, ...]
    reply: Mapping[str, Any] | None
    forwards: tuple[Routed, ...] = ()
    error: WatchtowerError | None = None


# --- Events and replay protection ----------------------------------------------------------------


def make_event(instance: str, height: int, origin: Origin, reply: Mapping[str, Any], body: EventBody) -> Event:
    """An event on `instance` caused by the command `origin` names."""
    return Event(stream_id=instance, block_height=height, caller=origin.caller, nonce=origin.nonce,
                 digest=origin.digest, reply=reply, body=body)


def replay_record(callers: FrozenMap[CallerRecord], cmd: Command, height: int) -> CallerRecord | None:
    """The caller's record when `cmd` is an exact retry of its last command (same nonce and
    digest); otherwise None after checking the nonce grows (NONCE_REPLAYED / INVALID_ARGUMENT)."""
    record = callers.get(cmd.caller)
    if record is not None and cmd.nonce == record.last_nonce and command_digest(cmd) == record.last_digest:
        return record
    check_nonce(None if record is None else record.last_nonce, cmd.nonce, block_height=height)
    return None


def check_event_envelope(event: Event, instance: str) -> None:
    """MALFORMED_RECORD for an event of another instance or with a nonce beyond its block's ceiling
    (decide could not have accepted that command)."""
    if event.stream_id != instance:
        raise MalformedRecordError(f"a {event.type} event of {event.stream_id!r} applied to {instance!r}")
    if event.nonce > nonce_ceiling(event.block_height):
        raise MalformedRecordError(
            f"{event.type} carries nonce {event.nonce}, beyond the ceiling of block {event.block_height}"
        )


def record_caller(callers: FrozenMap[CallerRecord], event: Event) -> FrozenMap[CallerRecord]:
    """The caller records after a command-caused `event` (the log's latest event wins, as in the
    stream actor: events carry no caller signature, so the fold does not refuse a lower nonce)."""
    return callers.set(event.caller, CallerRecord(event.nonce, event.digest, event.reply))


def event_int(value: object, name: str, minimum: int = 0, maximum: int = MAX_CBY) -> int:
    """An integer body field `name` of a log record; InvalidArgumentError (quarantine) when out of range."""
    if type(value) is not int or not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}")
    return value
