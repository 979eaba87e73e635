"""What the SDK asks of the HTTP API, and how it reads the answers.

`StreamApi` is the part of `client.http.ApiClient` the SDK's publisher and subscriber call
(anything with these methods will do, e.g. a test's fake). The readers below take an answer's
integer fields by their CIP-7 names, falling back to the names a 0.1 API answered with, so one
SDK reads both; a field missing or not an integer is MALFORMED_RECORD naming what was answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from watchtower.protocol.errors import MalformedRecordError
from watchtower.protocol.signed_command import Command
from watchtower.protocol.stream.key_schedule import KeySchedule


class StreamApi(Protocol):
    """The part of `ApiClient` the SDK uses (anything with these methods will do)."""

    def command(self, cmd: Command, *, timeout_s: float = ...) -> dict[str, Any]: ...

    def get_head(self, stream_id: str) -> dict[str, Any]: ...

    def get_since(
        self,
        stream_id: str,
        cursor: int = ...,
        limit: int = ...,
        *,
        filter: Mapping[str, Any] | None = ...,
        min_head: int | None = ...,
        wait_ms: int | None = ...,
        proof: bool = ...,
    ) -> dict[str, Any]: ...

    def key_schedule(self, stream_id: str) -> KeySchedule: ...

    def feed(self, feed_id: int) -> dict[str, Any]: ...



def int_field(data: Mapping[str, Any], name: str, what: str, *, alias: str | None = None) -> int:
    """`data[name]` as an int; `alias` is the field's 0.1 name, read when a 0.1 API omits `name`."""
    value = data.get(name)
    if value is None and alias is not None:
        value = data.get(alias)
    if type(value) is not int:
        raise MalformedRecordError(f"{what} has no integer {name!r}; the API answered {sorted(data)}")
    return value


# CIP-7's field names and the names a 0.1 API answered with (deprecated, kept for one release).
_SPEC_NAMES = (("head_sequence", "head"), ("floor_sequence", "floor"), ("publisher_key", "publisher_key_hex"),
               ("publisher_key", "public_key_hex"))


def with_spec_names(answer: Mapping[str, Any]) -> dict[str, Any]:
    """`answer` with every CIP-7 field name present, filled from its 0.1 name where a 0.1 API
    answered only that (head -> head_sequence, floor -> floor_sequence, publisher_key_hex and
    public_key_hex -> publisher_key)."""
    out = dict(answer)
    for spec, old in _SPEC_NAMES:
        if spec not in out and old in out:
            out[spec] = out[old]
    return out


def head_of(data: Mapping[str, Any], what: str) -> int:
    """The answer's ``head_sequence`` (0.1: ``head``)."""
    return int_field(data, "head_sequence", what, alias="head")


def floor_of(data: Mapping[str, Any], what: str) -> int:
    """The answer's ``floor_sequence`` (0.1: ``floor``)."""
    return int_field(data, "floor_sequence", what, alias="floor")
