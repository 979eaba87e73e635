"""Integers in JSON bodies: one rule for every answer the API, the gateway and the key manager write.

JSON readers that hold numbers as IEEE doubles (JavaScript, jq, many others) round any integer
beyond 2**53 - 1, so an id or an amount past it silently changes on the way (a replay id such as
1740308173478772655 comes back as ...700). The rule (docs/http-api.md, "Integers in JSON"):

- **Replay ids are decimal strings, always** (``replay_id``, ``replayId``; and ``next`` of
  ``GET /v1/replays``): they are 63-bit hashes, so nearly every one is past 2**53 - 1, and a field
  that is a string only sometimes would be a trap.
- **Every other integer is a JSON number while its magnitude is at most 2**53 - 1, and its decimal
  string beyond.** Sequences, heads, cursors, key epochs, block heights, counts, nonces and CBY
  amounts stay far below that in any honest use; the string form is the safety net for the values a
  client can choose (a nonce or a target epoch near 2**63) or a balance that really grows that large.
  The OpenAPI documents type these fields ``integer | string`` (`openapi_int`).

One exception: a **signed document** inside an answer (a signed command, such as the key chain's
``command``, or a signed StreamMessage, whose ``timestamp_unix_ms`` and ``key_epoch`` the publisher
chose and signed) is written exactly as it was signed, integers as JSON numbers whatever their
size: its reader verifies the signature over those very integers (a JavaScript reader needs a JSON
parser that keeps big integers for that, as it does to build a command).

`json_safe_ints` applies the rule to a body just before it is written (the projections hand their routes a
`web_server.SafeJsonWeb`); readers of our own answers (the
SDK, the CLI, the workers' share exchange) take both forms with `as_int`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

MAX_SAFE_INT: Final = 2**53 - 1
ID_FIELDS: Final = frozenset({"replay_id", "replayId"})
"""Integer fields written as decimal strings whatever their value."""
_SIGNED_COMMAND_KEYS: Final = frozenset({"caller_public_key_hex", "signature_hex", "nonce", "body"})
_SIGNED_MESSAGE_KEY: Final = "publisher_sig_hex"


def json_safe_ints(value: Any, *, as_id: bool = False) -> Any:
    """`value` with the rule applied to every integer in it (bools are not integers here)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return str(value) if as_id or not -MAX_SAFE_INT <= value <= MAX_SAFE_INT else value
    if isinstance(value, Mapping):
        if value.keys() >= _SIGNED_COMMAND_KEYS or _SIGNED_MESSAGE_KEY in value:
            return value  # a signed document is written exactly as signed (module docstring)
        return {k: json_safe_ints(v, as_id=k in ID_FIELDS) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe_ints(v) for v in value]
    return value


def as_int(value: Any) -> Any:
    """An integer field of one of our answers, number or decimal string, as an int (None stays None;
    anything else is returned unchanged for the caller's own check)."""
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    return value


def openapi_int(minimum: int = 0, *, nullable: bool = False, description: str = "") -> dict[str, Any]:
    """The OpenAPI schema of an integer field under the rule: a number in ``minimum..2**53-1``, or
    (beyond) its decimal string. (`minimum`/`maximum` constrain numbers only, `pattern` strings only.)"""
    schema: dict[str, Any] = {"type": ["integer", "string", *(["null"] if nullable else [])], "minimum": minimum,
                              "maximum": MAX_SAFE_INT, "pattern": "^-?[0-9]{16,20}$"}
    if description:
        schema["description"] = description
    return schema


def openapi_id(*, nullable: bool = False, description: str = "") -> dict[str, Any]:
    """The OpenAPI schema of a replay id: always its decimal string."""
    schema: dict[str, Any] = {"type": ["string", *(["null"] if nullable else [])], "pattern": "^[1-9][0-9]{0,18}$"}
    if description:
        schema["description"] = description
    return schema

