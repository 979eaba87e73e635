"""How spec errors look over HTTP: a status per code, and the JSON body every error carries."""

from __future__ import annotations

from typing import Any, Final

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.json_ints import json_safe_ints

_STATUS: Final = {
    400: ("INVALID_ARGUMENT", "INVALID_FILTER", "LIMIT_EXCEEDED", "MALFORMED_RECORD", "SCHEMA_MISMATCH",
          "IMPROPER_CONFIG", "INVALID_ACCOUNT_KEY", "INVALID_TARGET_KEY_EPOCH", "RANGE_TOO_LARGE", "DECRYPTION_FAILED"),
    401: ("INVALID_SIGNATURE",),
    402: ("PAYMENT_REQUIRED", "ENTITLEMENT_REQUIRED", "INSUFFICIENT_CBY_BALANCE", "MIN_PURCHASE_NOT_MET"),
    403: ("UNAUTHORIZED", "SUBSCRIPTION_NOT_ALLOWED", "UNAUTHORIZED_SUBSCRIBER", "ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT",
          "KEY_REVOKED"),
    404: ("STREAM_NOT_FOUND", "SUBSCRIPTION_NOT_FOUND", "FEED_NOT_FOUND", "PUBLICATION_NOT_FOUND",
          "REPLAY_NOT_FOUND"),
    409: ("STALE_SEQUENCE", "NONCE_REPLAYED", "STREAM_ALREADY_EXISTS", "SUBSCRIBER_CAP_REACHED",
          "ACCOUNT_KEY_LIMIT_REACHED", "AUTHORIZATION_LIMIT_REACHED", "CANNOT_CANCEL", "NOT_PLATFORM_MANAGED_STREAM"),
    410: ("CURSOR_TOO_OLD",),
    413: ("PAYLOAD_TOO_LARGE",),
    503: ("NOT_READY",),
    504: ("TIMEOUT",),
}
STATUS_BY_CODE: Final = {code: status for status, codes in _STATUS.items() for code in codes}


def http_status(code: str) -> int:
    """The HTTP status for a spec error code (500 only for a server-side failure: WATCHTOWER_ERROR,
    the replay service's GENERIC_ERROR / GENERIC_BATCH_ERROR, or a code this build does not know)."""
    return STATUS_BY_CODE.get(code, 500)


def error_body(err: WatchtowerError) -> dict[str, Any]:
    """``{"error": {"code", "message"[, "details"]}}``, integers written by the JSON rule (`json_ints`)."""
    return {"error": json_safe_ints(err.to_dict())}
