"""One rooted error hierarchy whose codes are the spec's.

Every error the project raises on purpose is a `WatchtowerError`. Each subclass carries one code:
the CIP-7 actor and platform codes, the ICRC-77 replay errors (named after the draft's variants),
and a few project codes for the edges (malformed commands, stale sequences, replayed nonces,
unknown streams, undecodable records).

Errors cross Kafka and HTTP as JSON: `to_dict()` gives `{"code", "message"}` (plus `"details"`
when there are structured facts such as the current head), and `WatchtowerError.from_dict()`
rebuilds the right subclass. A code this build does not know still round-trips: it comes back as
a plain `WatchtowerError` whose `.code` is the foreign code.

Messages say which rule was broken and what to do next. They never contain key material.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, cast

DetailValue = str | int | float | bool | None

_BY_CODE: dict[str, type[WatchtowerError]] = {}


class WatchtowerError(Exception):
    """Root of every deliberate Watchtower failure.

    `code` is the spec's code string, `message` a human sentence (rule broken, what to do next),
    `details` optional JSON-safe facts for programs (never secrets).
    """

    CODE: ClassVar[str] = "WATCHTOWER_ERROR"
    DEFAULT_MESSAGE: ClassVar[str] = "The request failed; see the error code."
    # The ICRC-77 variant name this code answers to, for replay APIs that speak ICRC-77.
    ICRC77_VARIANT: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A class that declares its own CODE owns it; a subclass that only refines behaviour
        # (say, a narrower InvalidArgumentError) shares its parent's code and rebuilds as the parent.
        if "CODE" not in cls.__dict__:
            return
        if cls.CODE in _BY_CODE:
            raise TypeError(f"duplicate Watchtower error code {cls.CODE}")
        _BY_CODE[cls.CODE] = cls

    def __init__(
        self,
        message: str | None = None,
        *,
        details: Mapping[str, DetailValue] | None = None,
        code: str | None = None,
    ) -> None:
        self.message: str = message if message else self.DEFAULT_MESSAGE
        self.details: dict[str, DetailValue] = dict(details) if details else {}
        # Only the root class takes a foreign code (an error from a newer peer); subclasses
        # always carry their own.
        self._code = code if (code and type(self) is WatchtowerError) else self.CODE
        super().__init__(self.message)

    @property
    def code(self) -> str:
        """The spec code string, e.g. ``"CURSOR_TOO_OLD"``."""
        return self._code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only constructor arguments do not survive Exception's default pickling, and
        # errors do travel between processes (Spark executors, multiprocessing pools).
        return (_restore, (self.code, self.message, self.details))

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``{"code", "message"}`` and ``"details"`` only when there are any."""
        out: dict[str, object] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = dict(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> WatchtowerError:
        """Rebuild an error from `to_dict()` output; unknown codes keep their code string.

        Raises `MalformedRecordError` when `data` is not an error object.
        """
        code = data.get("code")
        message = data.get("message")
        details = data.get("details", {})
        if not isinstance(code, str) or not code:
            raise MalformedRecordError("an error object needs a non-empty string 'code'")
        if message is not None and not isinstance(message, str):
            raise MalformedRecordError("an error object's 'message' must be a string")
        if not isinstance(details, Mapping) or not all(isinstance(k, str) for k in details):
            raise MalformedRecordError("an error object's 'details' must be an object")
        return _restore(code, message or "", dict(details))


def _restore(code: str, message: str, details: Mapping[str, DetailValue]) -> WatchtowerError:
    klass = _BY_CODE.get(code)
    if klass is None:
        return WatchtowerError(message or None, details=details, code=code)
    return klass(message or None, details=details)


def error_class_for(code: str) -> type[WatchtowerError] | None:
    """The subclass registered for `code`, or None when this build does not know the code."""
    return _BY_CODE.get(code)


def known_error_codes() -> frozenset[str]:
    """Every code with a registered subclass."""
    return frozenset(_BY_CODE)


# --- CIP-7 actor method errors -------------------------------------------------------------------


class InvalidSignatureError(WatchtowerError):
    CODE = "INVALID_SIGNATURE"
    DEFAULT_MESSAGE = (
        "The publisher signature does not verify against the key in force at this sequence; "
        "re-sign the canonical signing bytes with the active publisher key."
    )


class PayloadTooLargeError(WatchtowerError):
    CODE = "PAYLOAD_TOO_LARGE"
    DEFAULT_MESSAGE = (
        "The payload exceeds the 16,384-byte inline limit (16,344 bytes of plaintext when "
        "encrypted); split it into several messages."
    )


class InvalidFilterError(WatchtowerError):
    CODE = "INVALID_FILTER"
    DEFAULT_MESSAGE = "The filter breaks the CIP-7 filter DSL; fix the named node and subscribe again."


class CursorTooOldError(WatchtowerError):
    CODE = "CURSOR_TOO_OLD"
    DEFAULT_MESSAGE = "The cursor is older than the retained window; resume from floor-1 or request a replay."

    @classmethod
    def for_floor(cls, *, cursor: int, floor: int, head: int,
                  replay: Mapping[str, object] | None = None) -> CursorTooOldError:
        """The error for `cursor` < `floor` − 1, naming the floor and both ways forward.

        `replay`: the ready register_replay request for the pruned range (`ring_window.replay_request`),
        carried in ``details["replay"]`` so a client can send it as it is.
        """
        details: dict[str, object] = {"cursor": cursor, "floor": floor, "head": head}
        way_back = "request an ICRC-77 replay for the older range"
        if replay is not None:
            details["replay"] = dict(replay)
            price = replay.get("price_cby")
            way_back = (f"send the ready replay request in details.replay for [{cursor + 1}, {floor}) "
                        f"(price {price} CBY)")
        return cls(
            f"cursor {cursor} is older than the retained window (floor {floor}, head {head}); "
            f"messages up to {floor - 1} were pruned. Resume with cursor {floor - 1} to read "
            f"from the floor, or {way_back}.",
            # The request is a nested JSON object, the one detail that is not a scalar.
            details=cast(Mapping[str, DetailValue], details),
        )


class LimitExceededError(WatchtowerError):
    CODE = "LIMIT_EXCEEDED"
    DEFAULT_MESSAGE = "The limit is outside its allowed range; ask for fewer items per call."


class UnauthorizedError(WatchtowerError):
    CODE = "UNAUTHORIZED"
    DEFAULT_MESSAGE = "The caller may not perform this action; sign with the owner's or holder's key."
    ICRC77_VARIANT = "Unauthorized"


class SubscriberCapReachedError(WatchtowerError):
    CODE = "SUBSCRIBER_CAP_REACHED"
    DEFAULT_MESSAGE = (
        "The stream already has max_subscribers subscriptions; ask the owner to raise the cap "
        "or wait for a subscriber to leave."
    )


class SubscriptionNotAllowedError(WatchtowerError):
    CODE = "SUBSCRIPTION_NOT_ALLOWED"
    DEFAULT_MESSAGE = (
        "The stream is PRIVATE_ALLOWLIST and the caller is not on its allowlist; ask the owner to add the address."
    )


# --- CIP-7 platform key-management errors --------------------------------------------------------


class NotPlatformManagedStreamError(WatchtowerError):
    CODE = "NOT_PLATFORM_MANAGED_STREAM"
    DEFAULT_MESSAGE = "The stream is OPEN, so it has no epoch keys or billing; read its plaintext directly."


class PaymentRequiredError(WatchtowerError):
    CODE = "PAYMENT_REQUIRED"
    DEFAULT_MESSAGE = "No entitlement exists and no purchase was started; subscribe, then acquire access."
    ICRC77_VARIANT = "PaymentRequired"


class ActorNotAuthorizedForAccountError(WatchtowerError):
    CODE = "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT"
    DEFAULT_MESSAGE = (
        "This actor is not authorized to decrypt for the account on this stream; the account "
        "holder must call authorize_actor first."
    )


class EntitlementRequiredError(WatchtowerError):
    CODE = "ENTITLEMENT_REQUIRED"
    DEFAULT_MESSAGE = "The account's entitlement does not cover this key epoch; acquire access up to it first."


class InsufficientCbyBalanceError(WatchtowerError):
    CODE = "INSUFFICIENT_CBY_BALANCE"
    DEFAULT_MESSAGE = "The payer's CBY balance is below the total price; fund the payer and retry."


class InvalidTargetKeyEpochError(WatchtowerError):
    CODE = "INVALID_TARGET_KEY_EPOCH"
    DEFAULT_MESSAGE = (
        "The target key epoch is before the current key epoch; purely historical epochs cannot "
        "be bought, so target the current epoch or later."
    )


class MinPurchaseNotMetError(WatchtowerError):
    CODE = "MIN_PURCHASE_NOT_MET"
    DEFAULT_MESSAGE = (
        "The purchase covers fewer new epochs than the stream's min_purchase_epochs; target a later key epoch."
    )


class DecryptionFailedError(WatchtowerError):
    CODE = "DECRYPTION_FAILED"
    DEFAULT_MESSAGE = (
        "The envelope did not open: it was altered, or the key, epoch or associated data "
        "(stream_id, sequence, key_epoch, kind, content_type) differ from the ones it was sealed with."
    )


class InvalidAccountKeyError(WatchtowerError):
    CODE = "INVALID_ACCOUNT_KEY"
    DEFAULT_MESSAGE = "The account key is not a usable 32-byte X25519 public key of scheme X25519."


class AccountKeyLimitReachedError(WatchtowerError):
    CODE = "ACCOUNT_KEY_LIMIT_REACHED"
    DEFAULT_MESSAGE = "The account already has 8 active keys; revoke one before registering another."


class AuthorizationLimitReachedError(WatchtowerError):
    CODE = "AUTHORIZATION_LIMIT_REACHED"
    DEFAULT_MESSAGE = "The account already authorizes 64 actors on this stream; revoke one before adding another."


class KeyRevokedError(WatchtowerError):
    CODE = "KEY_REVOKED"
    DEFAULT_MESSAGE = "The account key is revoked; register a new key and use its id."


# --- ICRC-77 replay errors (variant names from the draft) ---------------------------------------


class UnauthorizedSubscriberError(WatchtowerError):
    CODE = "UNAUTHORIZED_SUBSCRIBER"
    DEFAULT_MESSAGE = "Only a subscriber of the stream may request a replay of it; subscribe first."
    ICRC77_VARIANT = "UnauthorizedSubscriber"


class ImproperConfigError(WatchtowerError):
    CODE = "IMPROPER_CONFIG"
    DEFAULT_MESSAGE = "The replay request's range, filter or skip is invalid; fix it and resubmit."
    ICRC77_VARIANT = "ImproperConfig"


class RangeTooLargeError(WatchtowerError):
    CODE = "RANGE_TOO_LARGE"
    DEFAULT_MESSAGE = "The replay range exceeds what this service replays at once; split it."
    ICRC77_VARIANT = "RangeTooLarge"


class GenericReplayError(WatchtowerError):
    CODE = "GENERIC_ERROR"
    DEFAULT_MESSAGE = "The replay failed; see the message and retry later."
    ICRC77_VARIANT = "GenericError"


class GenericBatchError(WatchtowerError):
    CODE = "GENERIC_BATCH_ERROR"
    DEFAULT_MESSAGE = "The batch of replay requests failed as a whole; retry the items one by one."
    ICRC77_VARIANT = "GenericBatchError"


class PublicationNotFoundError(WatchtowerError):
    CODE = "PUBLICATION_NOT_FOUND"
    DEFAULT_MESSAGE = "No stream has that id; list streams to find the right one."
    ICRC77_VARIANT = "PublicationNotFound"


class SubscriptionNotFoundError(WatchtowerError):
    CODE = "SUBSCRIPTION_NOT_FOUND"
    DEFAULT_MESSAGE = "The caller has no subscription to this stream; subscribe first."
    ICRC77_VARIANT = "SubscriptionNotFound"


class ReplayNotFoundError(WatchtowerError):
    CODE = "REPLAY_NOT_FOUND"
    DEFAULT_MESSAGE = "No replay has that id; list your replays to find it."
    ICRC77_VARIANT = "NotFound"


class CannotCancelError(WatchtowerError):
    CODE = "CANNOT_CANCEL"
    DEFAULT_MESSAGE = "The replay already finished and can no longer be cancelled."
    ICRC77_VARIANT = "CannotCancel"


# --- Project codes at the edges ------------------------------------------------------------------


class InvalidArgumentError(WatchtowerError):
    CODE = "INVALID_ARGUMENT"
    DEFAULT_MESSAGE = "A command or configuration field is malformed; fix the named field."


class StaleSequenceError(WatchtowerError):
    CODE = "STALE_SEQUENCE"
    DEFAULT_MESSAGE = "The publish's sequence is not head+1; read the head, re-sign for head+1 and publish again."

    @classmethod
    def for_head(cls, *, expected: int, head: int) -> StaleSequenceError:
        """The error for a publish signed for `expected` while the stream's head is `head`."""
        return cls(
            f"publish was signed for sequence {expected}, but the stream head is {head}, so the "
            f"next sequence is {head + 1}; re-sign the message for sequence {head + 1} and publish "
            f"again (the signature covers the sequence, so it is never renumbered).",
            details={"expected_sequence": expected, "head": head},
        )


class NonceReplayedError(WatchtowerError):
    CODE = "NONCE_REPLAYED"
    DEFAULT_MESSAGE = "The command's nonce was already used by this account; sign it again with a higher nonce."


class StreamNotFoundError(WatchtowerError):
    CODE = "STREAM_NOT_FOUND"
    DEFAULT_MESSAGE = "No stream has that id; create it first or check the id."


class StreamAlreadyExistsError(WatchtowerError):
    CODE = "STREAM_ALREADY_EXISTS"
    DEFAULT_MESSAGE = "A stream with that id already exists; pick another id."


class MalformedRecordError(WatchtowerError):
    CODE = "MALFORMED_RECORD"
    DEFAULT_MESSAGE = "The record's bytes cannot be decoded; it is corrupt or not a Watchtower record."


class SchemaMismatchError(WatchtowerError):
    CODE = "SCHEMA_MISMATCH"
    DEFAULT_MESSAGE = "The record does not fit the schema it claims; upgrade this consumer or fix the producer."


class FeedNotFoundError(WatchtowerError):
    CODE = "FEED_NOT_FOUND"
    DEFAULT_MESSAGE = "No feed has that id in the registry; run `watchtower list` to see the feeds."


class RequestTimeoutError(WatchtowerError):
    CODE = "TIMEOUT"
    DEFAULT_MESSAGE = (
        "No worker answered in time; check that the workers are running (`watchtower up`) and retry "
        "the same signed command (a retry is idempotent)."
    )


class NotReadyError(WatchtowerError):
    CODE = "NOT_READY"
    DEFAULT_MESSAGE = (
        "The projection worker is still recovering its tables after a start or rebalance, so its "
        "answer would be stale; retry in a moment."
    )
