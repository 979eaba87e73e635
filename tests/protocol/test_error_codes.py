"""The rooted error hierarchy: spec codes, JSON round trips, messages that say what to do."""

from __future__ import annotations

import pickle

import pytest

from watchtower.protocol import errors
from watchtower.protocol.errors import (
    CursorTooOldError,
    MalformedRecordError,
    StaleSequenceError,
    WatchtowerError,
    error_class_for,
    known_error_codes,
)

CIP7_CODES = {
    "INVALID_SIGNATURE",
    "PAYLOAD_TOO_LARGE",
    "INVALID_FILTER",
    "CURSOR_TOO_OLD",
    "LIMIT_EXCEEDED",
    "UNAUTHORIZED",
    "SUBSCRIBER_CAP_REACHED",
    "SUBSCRIPTION_NOT_ALLOWED",
    "NOT_PLATFORM_MANAGED_STREAM",
    "PAYMENT_REQUIRED",
    "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT",
    "ENTITLEMENT_REQUIRED",
    "INSUFFICIENT_CBY_BALANCE",
    "INVALID_TARGET_KEY_EPOCH",
    "MIN_PURCHASE_NOT_MET",
    "DECRYPTION_FAILED",
    "INVALID_ACCOUNT_KEY",
    "ACCOUNT_KEY_LIMIT_REACHED",
    "AUTHORIZATION_LIMIT_REACHED",
    "KEY_REVOKED",
}
PROJECT_CODES = {
    "INVALID_ARGUMENT",
    "STALE_SEQUENCE",
    "NONCE_REPLAYED",
    "STREAM_NOT_FOUND",
    "MALFORMED_RECORD",
    "SCHEMA_MISMATCH",
}
ICRC77_VARIANTS = {
    "Unauthorized",
    "UnauthorizedSubscriber",
    "ImproperConfig",
    "PaymentRequired",
    "RangeTooLarge",
    "GenericError",
    "GenericBatchError",
    "PublicationNotFound",
    "SubscriptionNotFound",
    "NotFound",
    "CannotCancel",
}
ALL_CLASSES = [error_class_for(code) for code in sorted(known_error_codes())]


def test_every_spec_and_project_code_has_a_class() -> None:
    assert known_error_codes() >= CIP7_CODES | PROJECT_CODES


def test_every_icrc77_variant_maps_to_a_code() -> None:
    variants = {cls.ICRC77_VARIANT for cls in ALL_CLASSES if cls is not None and cls.ICRC77_VARIANT}
    assert variants == ICRC77_VARIANTS


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.CODE if c else "?")
def test_each_class_round_trips_through_json_and_pickle(cls: type[WatchtowerError]) -> None:
    assert issubclass(cls, WatchtowerError)
    default = cls()
    assert default.code == cls.CODE
    assert default.message == cls.DEFAULT_MESSAGE
    assert default.message.endswith(".")
    err = cls("specific words", details={"n": 1})
    data = err.to_dict()
    assert data == {"code": cls.CODE, "message": "specific words", "details": {"n": 1}}
    back = WatchtowerError.from_dict(data)
    assert type(back) is cls
    assert back.message == "specific words"
    assert back.details == {"n": 1}
    unpickled = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes, pickled one line above
    assert type(unpickled) is cls
    assert unpickled.to_dict() == data
    assert str(err) == f"{cls.CODE}: specific words"


def test_unknown_codes_survive_a_round_trip() -> None:
    err = WatchtowerError.from_dict({"code": "FROM_THE_FUTURE", "message": "hi"})
    assert type(err) is WatchtowerError
    assert err.to_dict() == {"code": "FROM_THE_FUTURE", "message": "hi"}
    assert pickle.loads(pickle.dumps(err)).code  # noqa: S301 - our own bytes == "FROM_THE_FUTURE"


@pytest.mark.parametrize("bad", [{}, {"code": 3}, {"code": "X", "message": 5}, {"code": "X", "details": [1]}])
def test_malformed_error_objects(bad: dict[str, object]) -> None:
    with pytest.raises(MalformedRecordError):
        WatchtowerError.from_dict(bad)


def test_subclass_cannot_be_given_a_foreign_code() -> None:
    assert errors.UnauthorizedError(code="OTHER").code == "UNAUTHORIZED"


def test_stale_sequence_names_the_current_head() -> None:
    err = StaleSequenceError.for_head(expected=7, head=9)
    assert "stream head is 9" in err.message
    assert "sequence 10" in err.message
    assert err.details == {"expected_sequence": 7, "head": 9}


def test_cursor_too_old_names_floor_and_remedies() -> None:
    err = CursorTooOldError.for_floor(cursor=3, floor=50, head=100)
    assert "floor 50" in err.message
    assert "cursor 49" in err.message
    assert "replay" in err.message


def test_refining_subclasses_share_their_parents_code() -> None:
    class NarrowArgumentError(errors.InvalidArgumentError):
        """A caller-specific refinement."""

    err = NarrowArgumentError("field x")
    assert err.code == "INVALID_ARGUMENT"
    assert type(WatchtowerError.from_dict(err.to_dict())) is errors.InvalidArgumentError
