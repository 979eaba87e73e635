"""The OpenAPI 3.1 description of the HTTP API, served at ``/openapi.json`` (see docs/http-api.md)."""

from __future__ import annotations

from typing import Any, Final

_ERROR: Final = {
    "description": "a spec error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _get(
    summary: str, params: list[dict[str, Any]] | None = None, errors: tuple[str, ...] = ("404",)
) -> dict[str, Any]:
    ok = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    responses: dict[str, Any] = {"200": ok}
    for code in errors:
        responses[code] = _ERROR
    return {"get": {"summary": summary, "parameters": params or [], "responses": responses}}


def _path(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": kind}}


def _query(name: str, kind: str = "integer", description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": {"type": kind}, "description": description}


_SID = _path("stream_id")

OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {"title": "Watchtower", "version": "1",
             "description": "CIP-7 feeds on Apache Kafka: signed commands in, projections out."},
    "paths": {
        "/v1/health": _get("liveness of this worker", errors=()),
        "/v1/commands": {"post": {
            "summary": "submit a signed command and wait for its committed reply",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["command"],
                "properties": {"command": {"$ref": "#/components/schemas/Command"},
                               "timeout_s": {"type": "number", "default": 30}}}}}},
            "responses": {"200": {"description": "the method's reply", "content": {"application/json": {
                "schema": {"type": "object", "properties": {"result": {"type": "object"}}}}}},
                **dict.fromkeys(("400", "401", "403", "404", "409", "413", "504"), _ERROR)},
        }},
        "/v1/streams/{stream_id}": _get("stream info: head fields, config, allowlist", [_SID]),
        "/v1/streams/{stream_id}/head": _get("CIP-7 get_head", [_SID]),
        "/v1/streams/{stream_id}/messages": _get(
            "CIP-7 get_since", [_SID, _query("cursor"), _query("limit", description="1..500"),
                                _query("filter", "string", "filter DSL as JSON"),
                                _query("min_head", description="wait until the projection reaches this head"),
                                _query("wait_ms")], errors=("400", "404", "410")),
        "/v1/streams/{stream_id}/keys/at/{sequence}": _get("CIP-7 get_key_at_sequence",
                                                           [_SID, _path("sequence", "integer")], errors=("400", "404")),
        "/v1/streams/{stream_id}/keys": _get("CIP-7 get_key_history (paged)", [_SID, _query("from"), _query("limit")]),
        "/v1/streams/{stream_id}/subscribers": _get("subscriptions by address",
                                                    [_SID, _query("active_only", "boolean")]),
        "/v1/feeds": _get("WatchtowerRegistry listings", [_query("owner", "string")], errors=()),
        "/v1/feeds/{feed_id}": _get("one listing", [_path("feed_id", "integer")]),
        "/v1/admin/digest": _get("digest of this worker's projection tables", errors=()),
    },
    "components": {"schemas": {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string", "examples": ["CURSOR_TOO_OLD"]},
                           "message": {"type": "string"}, "details": {"type": "object"}}}}},
        "Command": {"type": "object",
                    "required": ["method", "stream_id", "caller_public_key_hex", "nonce", "body", "signature_hex"],
                    "properties": {"method": {"type": "string"}, "stream_id": {"type": "string"},
                                   "caller_public_key_hex": {"type": "string"}, "nonce": {"type": "integer"},
                                   "body": {"type": "object"}, "signature_hex": {"type": "string"}}},
    }},
}
