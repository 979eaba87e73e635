"""Query, path and body parameters of the HTTP API: one strict parser, spec error codes.

Every integer parameter (``cursor``, ``limit``, ``min_head``, ``wait_ms``, ``from`` and the
``sequence`` path segment) goes through `int_param`: plain ASCII digits only (no sign tricks,
underscores, spaces or other scripts' digits), at most 19 of them, and a range that stops at
2**63 - 1 (a Kafka/Avro ``long``), so no handler ever sees a number it cannot store. ``limit`` of
``get_since`` is special by the spec: anything but an integer in 1..500 is LIMIT_EXCEEDED, and it
is checked before every other parameter (DESIGN §7.5).

Bounds that are this API's own rules, documented in docs/http-api.md:

- ``wait_ms`` (long poll): 0..30,000 ms. A poll holds a connection; a client that wants to wait
  longer polls again.
- ``timeout_s`` (``POST /v1/commands``): a number in (0, 120] seconds. A command is produced only
  after its timeout passed this check, so a rejected timeout never leaves a command applied behind
  a TIMEOUT answer.

Every JSON a request carries (a ``filter``, a command body) is read by `json_text`: an integer
literal of more than `MAX_JSON_INT_DIGITS` digits is refused while parsing, with the caller's spec
code. No integer this API takes is wider than 2**64 (20 digits), and without the bound a number of
more than 4,300 digits makes Python's ``int()`` itself raise, which used to surface as a server
error (and a message echoing such a number could not even be formatted).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.constants import MAX_GET_SINCE_LIMIT, MAX_WIRE_UINT64, MIN_GET_SINCE_LIMIT
from watchtower.protocol.errors import InvalidArgumentError, InvalidFilterError, LimitExceededError, WatchtowerError

MAX_INT: Final = MAX_WIRE_UINT64  # 2**63 - 1
MAX_WAIT_MS: Final = 30_000
DEFAULT_WAIT_MS: Final = 2_000
MAX_TIMEOUT_S: Final = 120.0
DEFAULT_TIMEOUT_S: Final = 30.0
DEFAULT_LIMIT: Final = 100
# A filter has at most 16 predicates and depth 4 (DESIGN §7.4); 16 KiB of JSON is far beyond
# any valid one, and caps the work a hostile filter can cause before it is refused.
MAX_FILTER_CHARS: Final = 16_384
# Twice the digits of 2**64, so a wider number than any field takes still reaches that field's own
# check (which names the field and its range), while Python's int() of long text stays far away.
MAX_JSON_INT_DIGITS: Final = 40

# Plain ASCII digits; a minus sign only before a non-zero digit (never "-0", "-007", "+5" or " 5").
_DIGITS = re.compile(r"[0-9]{1,19}|-[1-9][0-9]{0,18}")


def int_text(text: str, name: str, *, minimum: int = 0, maximum: int = MAX_INT,
             error: type[WatchtowerError] = InvalidArgumentError) -> int:
    """`text` as an integer in [minimum, maximum], else `error` naming the parameter and its range."""
    if not _DIGITS.fullmatch(text):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise error(f"{name} must be an integer in {minimum}..{maximum}, got {shown!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise error(f"{name} must be an integer in {minimum}..{maximum}, got {value}")
    return value


def int_param(query: Mapping[str, str], name: str, default: int, *, minimum: int = 0, maximum: int = MAX_INT,
              error: type[WatchtowerError] = InvalidArgumentError) -> int:
    """Query parameter `name` (absent: `default`) through `int_text`; given empty (``limit=``) it
    is refused like any other text that is not an integer: a client that meant a value sent none."""
    text = query.get(name)
    if text is None:
        return default
    return int_text(text, name, minimum=minimum, maximum=maximum, error=error)


def limit_param(query: Mapping[str, str], default: int = DEFAULT_LIMIT) -> int:
    """get_since's ``limit``: LIMIT_EXCEEDED unless an integer in 1..500 (the spec's first check)."""
    return int_param(query, "limit", default, minimum=MIN_GET_SINCE_LIMIT, maximum=MAX_GET_SINCE_LIMIT,
                     error=LimitExceededError)


def wait_ms_param(query: Mapping[str, str]) -> int:
    """The long-poll wait, 0..30,000 ms (default 2,000)."""
    return int_param(query, "wait_ms", DEFAULT_WAIT_MS, maximum=MAX_WAIT_MS)


def json_text(text: str | bytes, *, what: str, usage: str,
              error: type[WatchtowerError] = InvalidArgumentError) -> Any:
    """`text` decoded as JSON, else `error` saying what `what` must be (`usage`).

    Refused: text that is not JSON (or not UTF-8), nesting deep enough to exhaust the recursion
    limit, and an integer literal of more than `MAX_JSON_INT_DIGITS` digits.
    """
    try:
        return json.loads(text, parse_int=_bounded_int)
    except _IntTooWideError as wide:
        raise error(f"{what} holds an integer of {wide.digits} digits; integers here have at most "
                    f"{MAX_JSON_INT_DIGITS} digits (none of them is wider than 2**64); {usage}") from None
    except (ValueError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
        raise error(f"{what} is not JSON; {usage}") from None
    except RecursionError:
        raise error(f"{what} nests too deep; {usage}") from None


class _IntTooWideError(Exception):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _bounded_int(literal: str) -> int:
    # json's scanner hands every integer literal here as text (an optional "-", then digits).
    digits = len(literal) - literal.startswith("-")
    if digits > MAX_JSON_INT_DIGITS:
        raise _IntTooWideError(digits)
    return int(literal)


def bool_param(query: Mapping[str, str], name: str) -> bool:
    """Exactly ``true`` or ``false``, as documented (absent: false); anything else (``1``, ``yes``,
    ``TRUE``, empty) is INVALID_ARGUMENT, so a typo never silently reads as false."""
    text = query.get(name)
    if text is None or text == "false":
        return False
    if text == "true":
        return True
    shown = text if len(text) <= 40 else text[:37] + "..."
    raise InvalidArgumentError(f"{name} must be true or false (lowercase), got {shown!r}; drop it for false")


def filter_param(query: Mapping[str, str], name: str = "filter") -> object:
    """The filter DSL given as JSON text; INVALID_FILTER when it is not (bounded) JSON."""
    text = query.get(name)
    if not text:
        return None
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidFilterError(f"{name} is {len(text)} characters; a valid filter (at most 16 predicates, "
                                 f"depth 4) fits in {MAX_FILTER_CHARS}")
    return json_text(text, what=name, error=InvalidFilterError,
                     usage="pass the filter DSL as JSON text, at most 4 levels deep")


def timeout_param(body: Mapping[str, object]) -> float:
    """``timeout_s`` of a command request: a number in (0, 120] seconds (default 30)."""
    raw = body.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidArgumentError(f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], "
                                   f"got {type(raw).__name__}")
    try:
        value = float(raw)
    except OverflowError:  # an integer too large for a float
        value = math.inf
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise InvalidArgumentError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {raw!r}"[:200])
    return value
