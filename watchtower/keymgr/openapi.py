"""The OpenAPI 3.1 description of the key manager's HTTP API, served at ``/openapi.json``.

Every POST takes ``{"command": <a signed command>}`` (the method named by the route, the stream id
as the envelope's stream id, a fresh microsecond nonce); its body fields are the command body's.
Every refusal is the API's error shape with a spec code. The test suite fuzzes the running service
against this document (tests/keymgr/test_keymgr_openapi_fuzz.py).
"""

from __future__ import annotations

from typing import Any, Final

from watchtower.http.errors import STATUS_BY_CODE
from watchtower.protocol.json_ints import openapi_int

_STR: Final = {"type": "string"}
_HEX: Final = {"type": "string", "pattern": "^([0-9a-f]{2})*$"}
_INT: Final = openapi_int(0)  # the JSON integer rule (docs/http-api.md "Integers in JSON")
_ERROR_REF: Final = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _object(required: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required), "properties": required}


#: ``reason`` is there only while ``ready`` is false.
_HEALTH: Final = {"type": "object", "required": ["ok", "quarantined", "ready", "sealed_seeds"], "properties": {
    "ok": {"type": "boolean"}, "ready": {"type": "boolean"}, "reason": _STR, "quarantined": _INT,
    "sealed_seeds": _INT}}

_ERRORS: Final = {
    str(status): _json(_ERROR_REF, "a spec error: {\"error\": {\"code\", \"message\", \"details\"?}}")
    for status in sorted({400, 401, 402, 403, 404, 409, 413, 503})
}


def _signed(summary: str, body: str, ok: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "description": f"The signed command's body: {body}",
        "requestBody": {"required": True, "content": {"application/json": {"schema": _object(
            {"command": {"$ref": "#/components/schemas/Command"}})}}},
        "responses": {"200": _json(ok), **_ERRORS},
    }}


OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {"title": "Watchtower Stream Key Manager", "version": "1",
             "description": "stream_encrypt, stream_decrypt and sealed epoch keys for PLATFORM_MANAGED feeds "
                            "(docs/keymgr.md)."},
    "paths": {
        "/v1/keymgr/encrypt": _signed(
            "CIP-7 stream_encrypt: by the stream's owner or its active publisher key",
            '{"key_epoch": int, "aad": bytes (envelope_aad of this stream and epoch), "plaintext": bytes '
            "(at most 16,344)}",
            _object({"envelope_hex": _HEX, "keymgr_receipt_hex": _HEX, "key_epoch": _INT, "actor_nonce": _INT})),
        "/v1/keymgr/decrypt": _signed(
            "CIP-7 stream_decrypt: by the beneficiary account or an actor it authorized, within its entitlement",
            '{"beneficiary_account": address, "key_epoch": int, "aad": bytes, "envelope": bytes}',
            _object({"plaintext_hex": _HEX})),
        "/v1/keymgr/epoch-keys": _signed(
            "epoch content keys sealed to the account's ACTIVE X25519 key (at most 1,024 epochs a call)",
            '{"account": address, "from_key_epoch": int, "to_key_epoch": int, "account_key_id": int (optional)}',
            _object({"account_key_id": _INT, "keys": {"type": "array", "items": _object(
                {"key_epoch": _INT, "sealed_key_hex": _HEX})}})),
        "/v1/keymgr/public-key": {"get": {
            "summary": "the ed25519 key whose receipts workers require on every paid publish",
            "responses": {"200": _json(_object({"public_key_hex": _HEX}))}}},
        "/v1/health": {"get": {
            "summary": "readiness (false, with its reason, while the events topic cannot be read up to its end) "
                       "and records the event fold quarantined",
            "responses": {"200": _json(_HEALTH)}}},
        "/healthz": {"get": {"summary": "the same as /v1/health", "responses": {"200": _json(_HEALTH)}}},
    },
    "components": {"schemas": {
        "Error": _object({"error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"type": "string", "enum": sorted({*STATUS_BY_CODE, "WATCHTOWER_ERROR"})},
            "message": _STR, "details": {"type": "object"}}}}),
        "Command": _object({"method": _STR, "stream_id": _STR, "caller_public_key_hex": _STR,
                            "nonce": {"type": "integer"}, "body": {"type": "object"}, "signature_hex": _STR}),
    }},
}
