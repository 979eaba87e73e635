"""The fixed transforms from a decided ingestion result to publishable payloads (CIP-7 "Ingestion
Flow" step 4). ``transform_method`` names one; nothing else, and never code, is run:

- ``identity`` (also when absent): one message, the result's canonical JSON, kind
  ``task_definition.publish_kind``, no tags;
- ``field_map``: ``task_definition.field_map = {"payload"?: path, "tags"?: {tag: path}}``: the
  payload is the canonical JSON at ``payload`` (default: the whole result), each tag the text,
  bool or finite number at its path;
- ``price_batch`` (CIP-7 "High-Volume Pricing Guidance"): the result is one tick, a list of ticks
  or ``{"ticks": [...]}``; a tick is ``{"symbol": text, "price": number, "venue"?: text,
  "ts_ms"?: int}``. One message of kind ``price_batch`` holds ``{"ticks": [...]}`` with tags
  ``symbol`` and ``venue`` (the common value, or ``*`` when the ticks differ), ``window_ms``
  (last ts_ms − first ts_ms, 0 without timestamps) and ``count``.

Every payload must fit a StreamMessage (16 KiB inline; 16,344 bytes of plaintext on a paid
stream, which is encrypted after): `check_payload_size`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.constants import MAX_EFFECTIVE_PLAINTEXT_BYTES, MAX_INLINE_PAYLOAD_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.ingestion.common import IngestReason, SelectionError, require_path, select_path
from watchtower.protocol.ingestion.results import canonical_json, parse_result
from watchtower.protocol.validation import is_int, is_number

TRANSFORMS: Final = ("identity", "field_map", "price_batch")
MULTIPLE: Final = "*"
_CONTENT_TYPE: Final = "application/json"


@dataclasses.dataclass(frozen=True, slots=True)
class Payload:
    """One message to publish."""

    kind: str
    payload: bytes
    tags: Mapping[str, str | float | bool]
    content_type: str = _CONTENT_TYPE


@dataclasses.dataclass(frozen=True, slots=True)
class Transform:
    """A parsed transform: its name, the messages' kind and its parameters."""

    name: str
    kind: str
    payload_path: str | None = None
    tag_paths: tuple[tuple[str, str], ...] = ()


class TransformError(Exception):
    """The result does not fit the transform: an IngestFailed `reason` with `detail`."""

    def __init__(self, reason: IngestReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_transform(method: str | None, task_definition: Mapping[str, Any]) -> Transform:
    """The transform `method` names, with its parameters from `task_definition` (INVALID_ARGUMENT otherwise)."""
    name = method or "identity"
    kind = task_definition.get("publish_kind", "price_batch" if name == "price_batch" else "ingest")
    if not isinstance(kind, str) or not kind:
        raise InvalidArgumentError("task_definition.publish_kind must be non-empty text")
    if name == "identity":
        return Transform(name, kind)
    if name == "price_batch":
        return Transform(name, "price_batch")
    if name != "field_map":
        raise InvalidArgumentError(f"transform_method must be one of {', '.join(TRANSFORMS)}, got {method!r}")
    spec = task_definition.get("field_map")
    if not isinstance(spec, Mapping) or not set(spec) <= {"payload", "tags"}:
        raise InvalidArgumentError('field_map needs task_definition.field_map = {"payload"?: path, "tags"?: {...}}')
    payload = spec.get("payload")
    tags = spec.get("tags", {})
    if not isinstance(tags, Mapping) or len(tags) > 32 or not all(isinstance(k, str) and k for k in tags):
        raise InvalidArgumentError("task_definition.field_map.tags must map up to 32 tag names to paths")
    return Transform(name, kind, None if payload is None else require_path(payload),
                     tuple(sorted((k, require_path(v)) for k, v in tags.items())))


def apply_transform(transform: Transform, result: bytes) -> tuple[Payload, ...]:
    """The payloads of the decided `result` (canonical JSON bytes); TransformError if it does not fit."""
    value = parse_result(result)
    if transform.name == "identity":
        return (Payload(transform.kind, result, {}),)
    if transform.name == "field_map":
        return (_field_map(transform, value),)
    return (_price_batch(value),)


def _field_map(transform: Transform, value: Any) -> Payload:
    try:
        body = value if transform.payload_path is None else select_path(value, transform.payload_path)
        tags = {name: _tag(select_path(value, path), name) for name, path in transform.tag_paths}
    except SelectionError as exc:
        raise TransformError(IngestReason.TRANSFORM_FAILED, f"field_map: {exc}") from None
    return Payload(transform.kind, canonical_json(body), tags)


def _tag(value: Any, name: str) -> str | float | bool:
    if isinstance(value, bool | str):
        return value
    if is_number(value) and math.isfinite(value):
        return float(value)
    raise TransformError(IngestReason.TRANSFORM_FAILED, f"tag {name!r} must be text, bool or a finite number")


def _price_batch(value: Any) -> Payload:
    ticks = value.get("ticks") if isinstance(value, Mapping) and "ticks" in value else value
    if isinstance(ticks, Mapping):
        ticks = [ticks]
    if not isinstance(ticks, list) or not ticks:
        raise TransformError(IngestReason.TRANSFORM_FAILED, "price_batch needs one tick or a non-empty list of ticks")
    clean = [_tick(t, i) for i, t in enumerate(ticks)]
    stamps = [t["ts_ms"] for t in clean if "ts_ms" in t]
    tags: dict[str, str | float | bool] = {
        "symbol": _common([t["symbol"] for t in clean]),
        "venue": _common([t.get("venue", "") for t in clean]),
        "window_ms": float(max(stamps) - min(stamps)) if stamps else 0.0,
        "count": float(len(clean)),
    }
    return Payload("price_batch", canonical_json({"ticks": clean}), tags)


def _tick(tick: Any, index: int) -> dict[str, Any]:
    where = f"price_batch tick {index}"
    if not isinstance(tick, Mapping):
        raise TransformError(IngestReason.TRANSFORM_FAILED, f"{where} must be an object")
    symbol, price = tick.get("symbol"), tick.get("price")
    if not isinstance(symbol, str) or not symbol or not is_number(price):
        raise TransformError(IngestReason.TRANSFORM_FAILED, f"{where} needs a text symbol and a numeric price")
    out = {"symbol": symbol, "price": price}
    if "venue" in tick:
        if not isinstance(tick["venue"], str):
            raise TransformError(IngestReason.TRANSFORM_FAILED, f"{where}: venue must be text")
        out["venue"] = tick["venue"]
    if "ts_ms" in tick:
        if not is_int(tick["ts_ms"]) or tick["ts_ms"] < 0:
            raise TransformError(IngestReason.TRANSFORM_FAILED, f"{where}: ts_ms must be a non-negative integer")
        out["ts_ms"] = tick["ts_ms"]
    return out


def _common(values: list[str]) -> str:
    return values[0] if len(set(values)) == 1 else MULTIPLE


def check_payload_size(payload: Payload, *, paid: bool) -> None:
    """TransformError(PAYLOAD_TOO_LARGE) unless `payload` fits one message (plaintext bound if `paid`)."""
    limit = MAX_EFFECTIVE_PLAINTEXT_BYTES if paid else MAX_INLINE_PAYLOAD_BYTES
    if len(payload.payload) > limit:
        raise TransformError(IngestReason.PAYLOAD_TOO_LARGE,
                             f"the payload is {len(payload.payload)} bytes, over the {limit}-byte message limit")
