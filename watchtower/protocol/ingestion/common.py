"""What the ingestion rules share (`ingestion`, `ingestion_results`, `ingestion_transform`): the
reason codes of IngestFailed, the bounds a result's JSON keeps, and the restricted JSONPath a task
selects with. `ingestion` names them all again, where readers look for them.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.validation import is_int

MAX_RESULT_BYTES: Final = 64 * 1024
"""A runner's result (canonical JSON) is at most this large; larger is OVERSIZED_RESULT."""
MAX_SAFE_JSON_INT: Final = 2**53 - 1


class IngestReason(StrEnum):
    """Why a tick published nothing: the ``reason`` of an IngestFailed event."""

    SOURCE_UNAVAILABLE = "SOURCE_UNAVAILABLE"  # every selected runner failed to fetch the source
    TIMEOUT = "TIMEOUT"  # the deadline passed with no result at all
    TOO_FEW_RESULTS = "TOO_FEW_RESULTS"  # some results, fewer than the proof type needs
    QUORUM_NOT_REACHED = "QUORUM_NOT_REACHED"  # enough results, no majority agreeing
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"  # results do not satisfy result_schema
    OVERSIZED_RESULT = "OVERSIZED_RESULT"  # a result or response beyond the task's byte bound
    TRANSFORM_FAILED = "TRANSFORM_FAILED"  # the decided result does not fit the transform
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"  # the transformed payload exceeds 16 KiB
    ENCRYPT_REFUSED = "ENCRYPT_REFUSED"  # stream_encrypt refused (paid streams)
    PUBLISH_REFUSED = "PUBLISH_REFUSED"  # the stream actor refused the publish
    RUNNERS_UNAVAILABLE = "RUNNERS_UNAVAILABLE"  # fewer registered runners than num_runners
    TICKS_SKIPPED = "TICKS_SKIPPED"  # ticks beyond the catch-up limit after an outage


REASON_HINTS: Final[Mapping[IngestReason, str]] = {
    IngestReason.SOURCE_UNAVAILABLE: "check that the source URL answers 2xx JSON from the runners' network",
    IngestReason.TIMEOUT: "start more runners (`watchtower runner start`) or raise timeout_blocks",
    IngestReason.TOO_FEW_RESULTS: "start more runners or lower num_runners",
    IngestReason.QUORUM_NOT_REACHED: "the runners disagree: use a stable source or the MEDIAN proof type",
    IngestReason.SCHEMA_MISMATCH: "make result_schema match what the selection returns",
    IngestReason.OVERSIZED_RESULT: "select fewer fields or raise max_bytes (at most 1 MiB)",
    IngestReason.TRANSFORM_FAILED: "make the transform's fields match the result",
    IngestReason.PAYLOAD_TOO_LARGE: "select less: a message payload is at most 16 KiB",
    IngestReason.ENCRYPT_REFUSED: "check the key manager is up and the stream is PLATFORM_MANAGED",
    IngestReason.PUBLISH_REFUSED: "check the delegated publisher key is still the stream's current key",
    IngestReason.RUNNERS_UNAVAILABLE: "register more runners (`watchtower runner start`)",
    IngestReason.TICKS_SKIPPED: "the scheduler was down longer than its catch-up limit; nothing to do",
}


def parse_reason(value: object) -> IngestReason:
    """`value` as an IngestReason, else INVALID_ARGUMENT listing the reasons."""
    try:
        return IngestReason(str(value)) if isinstance(value, str) else IngestReason(repr(value))
    except ValueError:
        raise InvalidArgumentError(
            f"reason must be one of {', '.join(r.value for r in IngestReason)}, got {value!r}"
        ) from None


# --- Selection paths -----------------------------------------------------------------------------

_PATH_RE: Final = re.compile(r"^\$?(?:(?:^|\.)[A-Za-z_][A-Za-z0-9_\-]*|\[\d{1,4}\])*$")
_STEP_RE: Final = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d{1,4})\]")


def require_path(path: object) -> str:
    """`path` if it is a restricted JSONPath: ``$``, ``$.a.b``, ``$.a[0].c`` (names and indexes only)."""
    if not isinstance(path, str) or not path or len(path) > 256 or not _PATH_RE.match(path):
        raise InvalidArgumentError(
            f"a selection path looks like $.data.price or $.items[0].price (names and indexes only), got {path!r}"
        )
    return path


class SelectionError(ValueError):
    """A path names something the document does not have."""


def select_path(document: Any, path: str) -> Any:
    """The value at `path` in `document` (SelectionError if absent)."""
    node = document
    for name, index in _STEP_RE.findall(require_path(path).removeprefix("$")):
        if name:
            if not isinstance(node, Mapping) or name not in node:
                raise SelectionError(f"{path}: no field {name!r}")
            node = node[name]
        else:
            if not isinstance(node, list) or int(index) >= len(node):
                raise SelectionError(f"{path}: no element [{index}]")
            node = node[int(index)]
    return node



def check_json_ints(value: Any, name: str = "result") -> None:
    """INVALID_ARGUMENT for an integer outside ±(2^53 − 1) anywhere in `value` (JSON readers lose them)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if is_int(node) and abs(node) > MAX_SAFE_JSON_INT:
            raise InvalidArgumentError(f"{name} holds the integer {node}, beyond 2^53-1; send it as a string")
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
