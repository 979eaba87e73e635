"""The OpenAPI 3.1 description of the HTTP API, served at ``/openapi.json`` (see docs/http-api.md).

It states what the server enforces (parameter ranges from `http_params`, every status a route can
answer, the shape of each answer), and the test suite fuzzes the running API against it
(tests/projections/test_http_openapi_fuzz.py): no 5xx, and no answer that breaks this document.
"""

from __future__ import annotations

from typing import Any, Final

from watchtower.http.errors import STATUS_BY_CODE
from watchtower.http.params import MAX_INT, MAX_TIMEOUT_S, MAX_WAIT_MS
from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT
from watchtower.protocol.json_ints import openapi_id, openapi_int

# Parameters (text in the URL): plain digits up to 2**63 - 1 (http_params).
_P_INT: Final = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_P_SEQ: Final = {"type": "integer", "minimum": 1, "maximum": MAX_INT}
# Integers in answers follow the JSON integer rule (json_ints, docs/http-api.md "Integers in JSON"):
# a number up to 2**53 - 1, its decimal string beyond; replay ids are always strings.
_INT: Final = openapi_int(0)
_SEQ: Final = openapi_int(1)
_STR: Final = {"type": "string"}
_OBJ: Final = {"type": "object"}
_NULLABLE_INT: Final = openapi_int(0, nullable=True)
_REPLAY_ID: Final = openapi_id(description="a replay id: always its decimal string (a 63-bit hash)")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR: Final = _json(_ref("Error"), "a spec error: {\"error\": {\"code\", \"message\"}}")
# Every route can be refused before its handler runs (a request line or header over 8,190 bytes).
_ALWAYS: Final = ("400",)
# A route that reads a body answers every spec status, and 408 TIMEOUT for a body that did not wholly
# arrive in time (`server.bounded_body`).
_POSTED: Final = frozenset({str(s) for s in STATUS_BY_CODE.values()} | {"408"})
_TABLE: Final = ("400", "404", "503")  # a table read: bad parameter, unknown id, worker not ready


def _get(summary: str, ok: dict[str, Any], params: list[dict[str, Any]] | None = None,
         errors: tuple[str, ...] = _TABLE) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": _json(ok)}
    for code in sorted({*_ALWAYS, *errors}):
        responses[code] = _ERROR
    return {"get": {"summary": summary, "parameters": params or [], "responses": responses}}


def _path(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}}


_SID: Final = _path("stream_id", {"type": "string", "minLength": 1})
_HEAD_FIELDS: Final = {
    "stream_id": _STR, "owner": _STR, "head_sequence": _INT, "floor_sequence": _SEQ,
    "head": {**_INT, "deprecated": True, "description": "deprecated alias of head_sequence"},
    "floor": {**_SEQ, "deprecated": True, "description": "deprecated alias of floor_sequence"},
    "capacity": _SEQ, "signing_key_id": _SEQ, "publisher_key": _STR,
    "publisher_key_hex": {**_STR, "deprecated": True, "description": "deprecated alias of publisher_key"},
    "policy": _STR, "access_mode": _STR,
    "max_subscribers": _INT, "active_subscribers": _INT, "last_key_epoch": _NULLABLE_INT,
}
#: Served beside the head fields (the head always, the stream info once ingestion failed).
_BATCH_ITEM_ERROR: Final = _object({"ok": {"const": False}, "error": _object(
    {"code": _STR, "message": _STR, "details": _object({"icrc77": _STR, "index": _INT})})})
_BATCH_ERROR: Final = _object({"code": {"type": "string", "enum": ["GENERIC_BATCH_ERROR"]}, "message": _STR},
                              {"details": _OBJ})
SUBSCRIPTION_STATUS_NOTE: Final = (
    "CIP-7 Subscription.status. PAUSED is part of CIP-7's enum and is accepted wherever a status is read, but "
    "this service never produces it: no CIP-7 method or rule sets it (subscribe makes a subscription ACTIVE, "
    "unsubscribe CANCELLED), and in a paid stream a lapsed entitlement is not a pause, since CIP-7 keeps delivery "
    "(the subscription) apart from decryption (the entitlement). docs/subscribing.md")
_SUBSCRIPTION: Final = _object(
    {"subscriber": _STR, "mode": {"type": "string", "enum": ["PUSH", "PULL", "PUSH_WITH_PULL_FALLBACK"]},
     "status": {"type": "string", "enum": ["ACTIVE", "PAUSED", "CANCELLED"], "description": SUBSCRIPTION_STATUS_NOTE},
     "created_at_sequence": _INT},
    {"filter_json": {"type": ["string", "null"]}, "start_cursor": _INT, "account_key_id": _NULLABLE_INT})
_ICRC77_PRICING: Final = _object({"perEvent": _INT, "currency": _STR})
_HEAD_OPTIONAL: Final = {
    "ingest_fail_count": {**_INT, "description": "CIP-7 ingest_fail_count: ingestion ticks "
                          "that published nothing, each an IngestFailed event (docs/ingestion.md)"},
    "replay_price_per_event_cby": {**_INT, "description": "ICRC-77 replay price per event, in CBY wei"},
    "icrc77:capable": {"type": "boolean", "description": "ICRC-77 publisher capability metadata: this stream "
                       "takes replay requests (the draft's key name)"},
    "icrc77:pricing": {**_ICRC77_PRICING, "description": "ICRC-77 pricing advertisement: perEvent in CBY wei "
                       "(the draft's key name)"},
    "icrc77_capable": {"type": "boolean", "deprecated": True, "description": "the earlier name of icrc77:capable"},
    "icrc77_pricing": {**_ICRC77_PRICING, "deprecated": True, "description": "the earlier name of icrc77:pricing"},
}
_SIGNED_COMMAND: Final = {
    **_object({"method": _STR, "stream_id": _STR, "caller_public_key_hex": _STR, "nonce": _SEQ, "body": _OBJ,
               "signature_hex": _STR}),
    "description": "The owner's signed command that put this key in force (create_stream for key 1, "
                   "rotate_publisher_key after): the key chain proof that clients verify from the owner's "
                   "address, see docs/key-chain.md",
}
_KEY_ENTRY: Final = _object({
    "signing_key_id": _SEQ, "publisher_key": _STR, "effective_sequence": _SEQ,
    "public_key_hex": {**_STR, "deprecated": True, "description": "deprecated alias of publisher_key"},
}, {"command": _SIGNED_COMMAND})
_PAGE: Final = _object({
    "stream_id": _STR, "messages": {"type": "array", "items": _OBJ}, "head_sequence": _INT, "floor_sequence": _SEQ,
    "head": {**_INT, "deprecated": True}, "floor": {**_SEQ, "deprecated": True}, "next_cursor": _INT,
}, {"proof": {**_object({"version": {"type": "integer", "const": 1}, "skipped": {"type": "array", "items": _OBJ}}),
              "description": "with proof=true: every message of cursor+1..next_cursor the filter skipped, "
                             "without its payload (docs/page-proofs.md)"}})
_QUARANTINE: Final = _object({"count": _INT, "recent": {"type": "array", "items": _object({
    "topic": _STR, "partition": _INT, "offset": _INT, "reason": _STR})}})
_HEALTH: Final = _object({
    "ok": {"type": "boolean"}, "ready": {"type": "boolean"}, "worker": _STR,
    "broker": _object({"reachable": {"type": "boolean"}}, {"error": _STR, "checked_ms_ago": _NULLABLE_INT}),
    "rebalancing": {"type": "boolean"}, "recovered": {"type": "boolean"},
    "partitions": {"type": "array", "items": _INT}, "long_polls": _INT, "quarantined": _QUARANTINE,
})
_FEED: Final = _object({"feed_id": _SEQ, "stream_id": _STR, "name": _STR, "description": _STR, "owner": _STR,
                        "registered_at_block": _INT})

# Server-Sent Events (watchtower.gateway.sse, docs/sse.md): a stream, not a JSON answer. The fuzz run
# skips operations marked x-streaming (an open stream never ends); tests/gateway/test_sse_*.py cover them.
_EVENTS: Final = {"get": {
    "summary": "the feed's messages (or, with subscriber, that subscriber's pushes) live as Server-Sent Events",
    "x-streaming": True,
    "parameters": [
        _path("feed_id", _P_SEQ),
        _query("subscriber", _STR, "stream this subscriber's push deliveries instead of the feed's messages"),
        _query("filter", _STR, "filter DSL as JSON (without subscriber only)"),
        _query("cursor", _P_INT, "resume after this sequence (the Last-Event-ID header wins)"),
        _query("heartbeat_s", {"type": "integer", "minimum": 1, "maximum": MAX_INT},
               "seconds between keep-alive comments (lowers the server's default only)"),
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": _STR,
         "description": "the last sequence received: the stream resumes after it"},
    ],
    "responses": {
        "200": {"description": "id: <sequence>, event: message, data: {feed_id, stream_id, sequence, message}; "
                               "event: lagged closes a reader that fell too far behind",
                "content": {"text/event-stream": {"schema": _STR}}},
        **dict.fromkeys(("400", "404", "410", "503"), _ERROR),
    },
}}

# The key manager's reads (keymgr_routes).
_AMOUNT: Final = openapi_int(0, description="CBY wei")
_ADDRESS: Final = {"type": "string", "pattern": "^0x[0-9a-f]{64}$"}
_BLOCK: Final = openapi_int(0)
_NULLABLE_BLOCK: Final = openapi_int(0, nullable=True)
_ACCOUNT: Final = _object({
    "account": _STR, "balance_cby": _AMOUNT,
    "keys": {"type": "array", "items": _object({
        "account_key_id": _BLOCK, "scheme": _STR, "public_key_hex": _STR,
        "status": {"type": "string", "enum": ["ACTIVE", "REVOKED"]},
        "registered_at_block": _BLOCK, "revoked_at_block": _NULLABLE_BLOCK})},
    "authorizations": {"type": "array", "items": _object({
        "actor": _STR, "stream_id": _STR, "status": {"type": "string", "enum": ["ACTIVE", "REVOKED"]},
        "granted_at_block": _BLOCK, "revoked_at_block": _NULLABLE_BLOCK})},
})
_ENTITLEMENT: Final = _object({
    "stream_id": _STR, "beneficiary_account": _STR, "active_until_key_epoch": _NULLABLE_BLOCK,
    "current_key_epoch": _BLOCK, "paid_stream_config": _OBJ})
_KEY_EPOCHS: Final = _object({
    "stream_id": _STR, "last_key_epoch": _NULLABLE_BLOCK,
    "epochs": {"type": "array", "items": _object({
        "key_epoch": _BLOCK, "effective_block_height": _BLOCK, "announced_by": _STR,
        "announced_at_block": _BLOCK})}})
_SUPPLY: Final = _object({"total_supply_cby": _AMOUNT, "sum_of_balances_cby": _AMOUNT, "accounts": _BLOCK})
_SUPPLY_SHARE: Final = _object({"partitions": {"type": "array", "items": _BLOCK}, "sum_of_balances_cby": _AMOUNT,
                                "accounts": _BLOCK,
                                "total_supply_cby": openapi_int(0, nullable=True, description="CBY wei")})
_KEYMGR_PATHS: Final = {
    "/v1/accounts/{address}": _get(
        "an account: CBY balance, account keys, actor authorizations (an unknown account: 0 and empty lists)",
        _ACCOUNT, [_path("address", _ADDRESS)], errors=("503",)),
    "/v1/streams/{stream_id}/entitlements/{account}": _get(
        "a beneficiary's entitlement on a paid stream (NOT_PLATFORM_MANAGED_STREAM if the stream is not paid)",
        _ENTITLEMENT, [_SID, _path("account", _ADDRESS)], errors=("409", "503")),
    "/v1/streams/{stream_id}/key-epochs": _get("the stream's key epoch schedule (KeyEpochRotated)", _KEY_EPOCHS,
                                               [_SID]),
    "/v1/cby/supply": _get("CBY total supply beside the sum of every balance (equal at quiescence)", _SUPPLY,
                           errors=("503",)),
    "/v1/cby/supply/local": _get("this worker's share of the balances (what /v1/cby/supply sums)", _SUPPLY_SHARE,
                                 errors=()),
    "/v1/keymgr/digest": _get("digest of this worker's key manager tables", _object(
        {"digest": _STR, "counts": _OBJ, "tables": _OBJ, "quarantined": _QUARANTINE}), errors=()),
}

# The replay reads (replay_routes): ICRC-77 ReplayStatus and get_replays.
_NULLABLE_SEQ: Final = openapi_int(1, nullable=True)
_REPLAY_STATE: Final = {"type": "object", "minProperties": 1, "maxProperties": 1, "properties": {
    "pending": {"type": "null"}, "running": {"type": "null"}, "completed": _INT, "canceled": _INT,
    "errored": _STR}, "additionalProperties": False,
    "description": "ICRC-77 ReplayState: one key, the status"}
_REPLAY: Final = _object({
    "replayId": _REPLAY_ID, "namespace": _STR,
    "config": _object({"filter": {"type": ["object", "null"]}, "skip": {"type": ["array", "null"], "items": _INT},
                       "memo_hex": _STR}),
    "stats": _object({"delivered": _INT, "filtered": _INT, "skipped": _INT, "next_sequence": _SEQ, "total": _INT,
                      "engine": {"type": "string", "enum": ["service", "spark"]}}),
    "range": {"type": "array", "items": _NULLABLE_SEQ, "minItems": 2, "maxItems": 2,
              "description": "[from, to]: to is null for an open-ended replay"},
    "status": _REPLAY_STATE, "stream_id": _STR, "requester": _STR, "price_cby": _AMOUNT, "end_id": _NULLABLE_INT,
    "percent": {"type": "number", "minimum": 0, "maximum": 100}})
_REPLAY_PATHS: Final = {
    "/v1/replays": _get(
        "ICRC-77 get_replays: replays ordered by id after `prev`, filtered; `next` is the next page's prev",
        _object({"replays": {"type": "array", "items": _REPLAY},
                 "next": openapi_id(nullable=True, description="the next page's prev (a replay id), or null")}),
        [_query("requester", _STR, "only this requester's replays"), _query("stream_id", _STR),
         _query("status", {"type": "string", "enum": ["pending", "running", "completed", "canceled", "errored"]}),
         _query("prev", _P_INT, "exclusive: replays with a greater id (a replay id's decimal digits)"),
         _query("take", {"type": "integer", "minimum": 1, "maximum": 500, "default": 100},
                "1..500, else LIMIT_EXCEEDED")],
        errors=("400", "503")),
    "/v1/replays/{replay_id}": _get("ICRC-77 replay_status (REPLAY_NOT_FOUND: 404)", _REPLAY,
                                    [_path("replay_id", _P_SEQ)]),
    "/v1/replays/digest": _get("digest of every partition's replay table, comparable with an offline rebuild",
                               _object({"digest": _STR, "replays": _INT}), errors=("503",)),
    "/v1/replays/local": _get("this worker's share of the replay table (what the replay reads gather)",
                              _object({"partitions": {"type": "array", "items": _BLOCK},
                                       "views": {"type": "array", "items": _OBJ}}), errors=()),
}

OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {"title": "Watchtower", "version": "1",
             "description": "CIP-7 feeds on Apache Kafka: signed commands in, projections out."},
    "paths": {
        "/v1/health": _get("this worker: readiness, broker, partitions, quarantined records", _HEALTH, errors=()),
        "/v1/commands": {"post": {
            "summary": "submit a signed command and wait for its committed reply",
            "description": ("publish answers CIP-7's INVALID_SIGNATURE, PAYLOAD_TOO_LARGE and UNAUTHORIZED, and "
                            "these extensions, each for a case CIP-7's list has no code for (docs/publish-auth.md): "
                            "STREAM_NOT_FOUND (the stream was never created), STALE_SEQUENCE (sequence is not "
                            "head + 1: re-read the head and re-sign), INVALID_ARGUMENT (a command or message that "
                            "cannot be read as a publish), NOT_READY and TIMEOUT (transport: send the same command "
                            "again)."),
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["command"],
                "properties": {"command": _ref("Command"),
                               "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                                             "default": 30}}}}}},
            "responses": {"200": _json(_object({"result": _OBJ}), "the method's reply"),
                          **dict.fromkeys(sorted(_POSTED - {"410"}), _ERROR)},
        }},
        "/v1/commands/batch": {"post": {
            "summary": ("ICRC-77 icrc77_register_replay and icrc77_cancel_replay: signed register_replay (or "
                        "cancel_replay) commands in, one result each out"),
            "description": ("All commands of one batch share one method: register_replay or cancel_replay. Each "
                            "is produced in request order and decided on its own, as on POST /v1/commands (not "
                            "atomically: each has its own nonce). results are in request order: {ok: true, "
                            "result} (a replay_id for a registration), or {ok: false, error} with the single "
                            "route's code (TIMEOUT for a late reply) and details that always hold icrc77 (the "
                            "ICRC-77 variant, GenericError for a code the draft does not name) and index. A batch "
                            "that is empty, longer than 100, holds a command of another method, mixes the two "
                            "methods or holds the same (caller, nonce) twice is refused as a whole: 400 with "
                            "results, one GenericBatchError per command sent (one for an empty batch), as "
                            "ICRC-77's vector, and error, the same GenericBatchError once (what earlier releases "
                            "answered); nothing produced. docs/replay.md"),
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["commands"],
                "properties": {"commands": {"type": "array", "items": _ref("Command"), "minItems": 1, "maxItems": 100},
                               "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                                             "default": 30}}}}}},
            "responses": {
                "200": _json(_object({"results": {"type": "array", "items": {"oneOf": [
                    _object({"ok": {"const": True}, "result": _OBJ}),
                    _BATCH_ITEM_ERROR]}}}),
                             "one result per command, in request order"),
                **dict.fromkeys(sorted(_POSTED - {"400", "410"}), _ERROR),
                "400": _json({"anyOf": [_ref("Error"), _object({"error": _BATCH_ERROR}, {"results": {
                    "type": "array", "minItems": 1,
                    "items": _object({"ok": {"const": False}, "error": _BATCH_ERROR})}})]},
                    "a spec error, or the batch refused as a whole (GENERIC_BATCH_ERROR, once per command in results)"),
            },
        }},
        "/v1/streams/{stream_id}": _get("stream info: head fields, config, allowlist", _object(
            _HEAD_FIELDS, {**_HEAD_OPTIONAL, "config": _OBJ, "allowlist": {"type": "array", "items": _STR},
                           "subscribers": _INT,
                           "created_at_block": _INT, "key_epoch": _NULLABLE_INT}), [_SID]),
        "/v1/streams/{stream_id}/head": _get("CIP-7 get_head", _object(_HEAD_FIELDS, _HEAD_OPTIONAL), [_SID]),
        "/v1/streams/{stream_id}/messages": _get(
            "CIP-7 get_since", _PAGE,
            [_SID, _query("cursor", _P_INT),
             _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_GET_SINCE_LIMIT, "default": 100},
                    "1..500, else LIMIT_EXCEEDED (checked first)"),
             _query("filter", _STR, "filter DSL as JSON"),
             _query("proof", {"type": "boolean"}, "also answer the completeness proof of the filtered page"),
             _query("min_head", _P_INT, "wait until the projection reaches this head (a long poll)"),
             _query("wait_ms", {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "default": 2000},
                    f"how long min_head waits, at most {MAX_WAIT_MS} ms")],
            errors=(*_TABLE, "410")),
        "/v1/streams/{stream_id}/keys/at/{sequence}": _get("CIP-7 get_key_at_sequence", _KEY_ENTRY,
                                                           [_SID, _path("sequence", _P_SEQ)]),
        "/v1/streams/{stream_id}/keys": _get(
            "CIP-7 get_key_history (paged); each entry carries its owner-signed command (the key chain)",
            _object({"entries": {"type": "array", "items": _KEY_ENTRY}, "next_from": _NULLABLE_INT}),
            [_SID, _query("from", _P_SEQ), _query("limit", {"type": "integer", "minimum": 1, "maximum": 500})]),
        "/v1/streams/{stream_id}/subscribers": _get(
            "subscriptions by address",
            _object({"stream_id": _STR, "subscribers": {"type": "array", "items": _SUBSCRIPTION}}),
            [_SID, _query("active_only", {"type": "boolean"})]),
        "/v1/feeds": _get("WatchtowerRegistry listings", _object({"feeds": {"type": "array", "items": _FEED}}),
                          [_query("owner", _STR)], errors=("503",)),
        "/v1/feeds/{feed_id}": _get("one listing", _FEED, [_path("feed_id", _P_SEQ)]),
        "/v1/feeds/{feed_id}/events": _EVENTS,
        "/v1/admin/digest": _get("digest of this worker's projection tables", _object(
            {"digest": _STR, "counts": _OBJ, "tables": _OBJ, "quarantined": _QUARANTINE}), errors=()),
        **_KEYMGR_PATHS,
        **_REPLAY_PATHS,
    },
    "components": {"schemas": {
        "Error": _object({"error": _object({"code": {"type": "string", "enum": sorted({*STATUS_BY_CODE,
                                                                                          "WATCHTOWER_ERROR"})},
                                            "message": _STR}, {"details": _OBJ})}),
        "Command": {"type": "object",
                    "required": ["method", "stream_id", "caller_public_key_hex", "nonce", "body", "signature_hex"],
                    "properties": {"method": _STR, "stream_id": _STR, "caller_public_key_hex": _STR,
                                   "nonce": {"type": "integer"}, "body": _OBJ, "signature_hex": _STR}},
    }},
}
