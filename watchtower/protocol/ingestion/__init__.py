"""CIP-7 ingestion (Data Types 9, "Ingestion Flow"): the task a stream's IngestionConfig asks for,
its block-clock schedule, task ids and the reason codes of IngestFailed.

Pure: no clock, no I/O. The scheduler, the runners and the aggregator all call these, so the
schedule a scheduler follows and the one an auditor recomputes cannot differ.

Task definition (``IngestionConfig.task_definition``), one of two kinds:

- ``{"kind": "http_json", "url", "method"?: "GET"|"POST", "headers"?: {text: text | {"secret": NAME}},
  "body"?: text, "select"?: {name: path} | path, "timeout_ms"?, "max_bytes"?, "timeout_blocks"?}``:
  an HTTP(S) JSON fetch; ``select`` picks fields with a restricted JSONPath (`select_path`);
- ``{"kind": "kafka_topic", "topic", "max_records"?, "select"?, "window_blocks"?, "timeout_blocks"?}``:
  the JSON records of an existing topic timestamped in the `window_blocks` blocks before the tick
  (`topic_window`), as ``{"records": [...], "count": n, "skipped": k}``; a deployment's own topics
  are refused by the runner.

Credentials never travel in a task definition: it is public (served with the stream's config and
written in clear on ``ingest.tasks``). A header's value may be a secret reference,
``{"secret": NAME}``, which each runner resolves from the secrets it holds; a credential-bearing
header (`is_credential_header`) must be one, and a URL may not carry ``user:password@``.

Plus, for the transforms (`ingestion_transform`): ``publish_kind`` (the messages' kind), and the
transform's own parameters (``field_map``, ``price_batch``).

Schedule: a stream created at block ``anchor`` has tick k (k ≥ 1) at height ``anchor + k *
interval_blocks``. Tick k's task id is SHA-256 of the deterministic CBOR of ``{stream_id, tick}``,
so a second task for the same tick has the same id and is recognised as a duplicate anywhere.
Catch-up policy (`due_ticks`): after an outage, at most ``max_catch_up`` of the most recent due
ticks are emitted; the older ones form one skipped range, reported as ``IngestFailed`` with reason
``TICKS_SKIPPED`` (so no tick disappears without a record).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import urllib.parse
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from watchtower.protocol import cbor
from watchtower.protocol.config import IngestionConfig
from watchtower.protocol.constants import BLOCK_INTERVAL_MS, GENESIS_UNIX_MS
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.ingestion.common import (
    MAX_RESULT_BYTES as MAX_RESULT_BYTES,
)
from watchtower.protocol.ingestion.common import (
    MAX_SAFE_JSON_INT as MAX_SAFE_JSON_INT,
)
from watchtower.protocol.ingestion.common import (
    REASON_HINTS as REASON_HINTS,
)
from watchtower.protocol.ingestion.common import (
    IngestReason as IngestReason,
)
from watchtower.protocol.ingestion.common import (
    SelectionError as SelectionError,
)
from watchtower.protocol.ingestion.common import (
    check_json_ints as check_json_ints,
)
from watchtower.protocol.ingestion.common import (
    parse_reason as parse_reason,
)
from watchtower.protocol.ingestion.common import (
    require_path as require_path,
)
from watchtower.protocol.ingestion.common import (
    select_path as select_path,
)
from watchtower.protocol.ingestion.results import check_result_schema
from watchtower.protocol.ingestion.transform import parse_transform
from watchtower.protocol.validation import require_int, require_text

MAX_TIMEOUT_BLOCKS: Final = 600
DEFAULT_TIMEOUT_BLOCKS: Final = 3
DEFAULT_FETCH_TIMEOUT_MS: Final = 2_000
MAX_FETCH_TIMEOUT_MS: Final = 30_000
DEFAULT_MAX_BYTES: Final = 64 * 1024
MAX_RESPONSE_BYTES: Final = 1024 * 1024
MAX_HEADERS: Final = 16
MAX_SELECT_FIELDS: Final = 32
MAX_KAFKA_RECORDS: Final = 1_000
DEFAULT_MAX_CATCH_UP: Final = 10


class ProofType(StrEnum):
    """The CIP-2 proof types ingestion supports (`ingestion_proof` decides each)."""

    NONE = "NONE"  # the first valid result
    QUORUM = "QUORUM"  # a strict majority of the selected runners return byte-identical results
    MEDIAN = "MEDIAN"  # numeric fields: the median across a strict majority of valid results



# --- The task definition -------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")  # an RFC 9110 field name
_FORBIDDEN_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
_CREDENTIAL_PARTS: Final = ("token", "secret", "key", "auth")
_SECRET_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REFERENCE_HINT: Final = ('name a secret the runners hold instead: {"secret": "NAME"} as the header\'s value, and give '
                      "each runner the file NAME in its WATCHTOWER_INGEST_SECRETS_DIR (docs/ingestion.md, Secrets)")


def is_credential_header(name: str) -> bool:
    """Whether header `name` carries a credential: Authorization, Proxy-Authorization, Cookie,
    X-Api-Key, or any name containing token, secret, key or auth (case-insensitive)."""
    lowered = name.lower()
    return lowered in _CREDENTIAL_HEADERS or any(part in lowered for part in _CREDENTIAL_PARTS)


@dataclasses.dataclass(frozen=True, slots=True)
class SecretRef:
    """A header value named by reference: the runner sends the secret `name` it holds."""

    name: str


def require_secret_name(name: object) -> str:
    """`name` if it names a secret: 1..64 of letters, digits, ``_``, ``.``, ``-``, not starting with a dot."""
    if not isinstance(name, str) or not _SECRET_NAME_RE.match(name):
        raise InvalidArgumentError(
            f"a secret name is 1 to 64 letters, digits, '_', '.' or '-' (not starting with '.' or '-'), got {name!r}"
        )
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class HttpJsonTask:
    """An HTTP(S) JSON fetch with a field selection."""

    url: str
    method: str
    headers: tuple[tuple[str, str | SecretRef], ...]
    body: str | None
    select: Mapping[str, str] | str | None
    timeout_ms: int
    max_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaTopicTask:
    """The JSON records of an existing topic whose timestamps fall in the `window_blocks` blocks
    before the tick (`topic_window`), each reduced by `select`, at most `max_records` of them."""

    topic: str
    max_records: int
    select: Mapping[str, str] | str | None
    window_blocks: int = 1


_TOPIC_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def require_topic(topic: object) -> str:
    """`topic` if it is a legal Kafka topic name that is not one of Kafka's own (``__…``)."""
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic.startswith("__"):
        raise InvalidArgumentError(f"task_definition.topic must be a Kafka topic name (not __internal), got {topic!r}")
    return topic


def topic_window(tick_height: int, window_blocks: int, genesis_ms: int, block_ms: int) -> tuple[int, int]:
    """[start, end) in ms of the records a kafka_topic task at `tick_height` reads: the
    `window_blocks` blocks that end where the tick's block starts. Every runner reads the same
    window, so honest runners return the same records (QUORUM can agree)."""
    end = genesis_ms + tick_height * block_ms
    return end - window_blocks * block_ms, end


@dataclasses.dataclass(frozen=True, slots=True)
class TaskSpec:
    """A parsed, valid task definition."""

    source: HttpJsonTask | KafkaTopicTask
    timeout_blocks: int
    publish_kind: str


def parse_task_definition(definition: Mapping[str, Any]) -> TaskSpec:
    """The task `definition` describes, or INVALID_ARGUMENT naming the field to fix."""
    if not isinstance(definition, Mapping):
        raise InvalidArgumentError("ingestion.task_definition must be an object")
    kind = definition.get("kind")
    timeout_blocks = _opt_int(definition, "timeout_blocks", DEFAULT_TIMEOUT_BLOCKS, 1, MAX_TIMEOUT_BLOCKS)
    publish_kind = require_text(definition.get("publish_kind", "ingest"), "task_definition.publish_kind")
    select = _select(definition.get("select"))
    source: HttpJsonTask | KafkaTopicTask
    if kind == "http_json":
        source = _http_task(definition, select)
    elif kind == "kafka_topic":
        source = KafkaTopicTask(require_topic(definition.get("topic")),
                                _opt_int(definition, "max_records", 100, 1, MAX_KAFKA_RECORDS), select,
                                _opt_int(definition, "window_blocks", 1, 1, MAX_TIMEOUT_BLOCKS))
    else:
        raise InvalidArgumentError(
            f"task_definition.kind must be http_json or kafka_topic, got {kind!r}; no other job runs"
        )
    return TaskSpec(source, timeout_blocks, publish_kind)


def _http_task(d: Mapping[str, Any], select: Mapping[str, str] | str | None) -> HttpJsonTask:
    url = require_text(d.get("url"), "task_definition.url")
    if not (url.startswith("http://") or url.startswith("https://")) or len(url) > 2048:
        raise InvalidArgumentError("task_definition.url must be an http:// or https:// URL of at most 2048 characters")
    if "@" in urllib.parse.urlsplit(url).netloc:
        raise InvalidArgumentError(f"task_definition.url may not carry credentials (user:password@): the config is "
                                   f"public. Send them in a header instead, and {REFERENCE_HINT}")
    method = d.get("method", "GET")
    if method not in ("GET", "POST"):
        raise InvalidArgumentError(f"task_definition.method must be GET or POST, got {method!r}")
    raw_headers = d.get("headers", {})
    if not isinstance(raw_headers, Mapping) or len(raw_headers) > MAX_HEADERS:
        raise InvalidArgumentError(f"task_definition.headers must be an object of at most {MAX_HEADERS} headers")
    headers: list[tuple[str, str | SecretRef]] = []
    for name, value in sorted(raw_headers.items()):
        if not isinstance(name, str) or not _TOKEN_RE.match(name):
            raise InvalidArgumentError(f"task_definition.headers: {name!r} is not a header name")
        if name.lower() in _FORBIDDEN_HEADERS:
            raise InvalidArgumentError(f"task_definition.headers may not set {name}")
        headers.append((name, _header_value(name, value)))
    body = d.get("body")
    if body is not None and not isinstance(body, str):
        raise InvalidArgumentError("task_definition.body must be text")
    timeout_ms = _opt_int(d, "timeout_ms", DEFAULT_FETCH_TIMEOUT_MS, 1, MAX_FETCH_TIMEOUT_MS)
    max_bytes = _opt_int(d, "max_bytes", DEFAULT_MAX_BYTES, 1, MAX_RESPONSE_BYTES)
    return HttpJsonTask(url, str(method), tuple(headers), body, select, timeout_ms, max_bytes)


def _header_value(name: str, value: object) -> str | SecretRef:
    if isinstance(value, Mapping):
        if set(value) != {"secret"}:
            raise InvalidArgumentError(f'task_definition.headers.{name}: a secret reference is {{"secret": "NAME"}}')
        return SecretRef(require_secret_name(value["secret"]))
    if not isinstance(value, str) or "\n" in value or "\r" in value or "\0" in value:
        raise InvalidArgumentError("task_definition.headers must map header names to single-line text or "
                                   '{"secret": "NAME"}')
    if is_credential_header(name):
        raise InvalidArgumentError(f"task_definition.headers.{name} carries a credential, and a task definition is "
                                   f"public (served with the stream's config, written in clear on ingest.tasks): "
                                   f"{REFERENCE_HINT}")
    return value


def _opt_int(d: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    return require_int(d.get(name, default), f"task_definition.{name}", minimum=low, maximum=high)


def _select(value: object) -> Mapping[str, str] | str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return require_path(value)
    if isinstance(value, Mapping) and 0 < len(value) <= MAX_SELECT_FIELDS:
        return {require_text(k, "task_definition.select key"): require_path(v) for k, v in value.items()}
    raise InvalidArgumentError(
        f"task_definition.select must be a path or an object of 1..{MAX_SELECT_FIELDS} name: path pairs"
    )



def apply_selection(document: Any, select: Mapping[str, str] | str | None) -> Any:
    """What a runner returns for `document`: the whole of it, one path, or an object of paths."""
    if select is None:
        return document
    if isinstance(select, str):
        return select_path(document, select)
    return {name: select_path(document, path) for name, path in select.items()}


def check_config(config: IngestionConfig) -> TaskSpec:
    """INVALID_ARGUMENT unless an enabled config can run: a known proof type and transform, a
    parseable task, and a result_schema that is a valid JSON Schema (`ingestion_results`)."""
    try:
        ProofType(config.proof_type)
    except ValueError:
        raise InvalidArgumentError(
            f"ingestion.proof_type must be NONE, QUORUM or MEDIAN, got {config.proof_type!r}"
        ) from None
    spec = parse_task_definition(config.task_definition)
    parse_transform(config.transform_method, config.task_definition)
    check_result_schema(config.result_schema)
    return spec


# --- Schedule and ids ----------------------------------------------------------------------------


def tick_height(anchor: int, interval_blocks: int, tick: int) -> int:
    """The block height of `tick` (tick ≥ 1) for a stream anchored at `anchor`."""
    return anchor + tick * interval_blocks


def tick_stamped(anchor: int, interval_blocks: int, timestamp_unix_ms: int) -> int | None:
    """The tick whose message carries `timestamp_unix_ms`, or None when no tick's does.

    An ingested message is stamped with the start of its tick's block (``GENESIS_UNIX_MS +
    tick_height * BLOCK_INTERVAL_MS``), so the ``events`` log alone tells which tick a stream's
    newest message finished: an aggregator that restarts reads it there, not from the messages."""
    offset = timestamp_unix_ms - GENESIS_UNIX_MS
    if offset < 0 or offset % BLOCK_INTERVAL_MS or interval_blocks < 1:
        return None
    steps = offset // BLOCK_INTERVAL_MS - anchor
    if steps < interval_blocks or steps % interval_blocks:
        return None
    return steps // interval_blocks


def latest_tick(anchor: int, interval_blocks: int, height: int) -> int:
    """The last tick due at `height` (0: none yet)."""
    if height <= anchor:
        return 0
    return (height - anchor) // interval_blocks


@dataclasses.dataclass(frozen=True, slots=True)
class DueTicks:
    """What a scheduler writes now: `ticks` in order, and the range it skips (inclusive), if any."""

    ticks: tuple[int, ...]
    skipped: tuple[int, int] | None


def due_ticks(last_written: int, anchor: int, interval_blocks: int, height: int,
              max_catch_up: int = DEFAULT_MAX_CATCH_UP) -> DueTicks:
    """The ticks after `last_written` that are due at `height`, at most `max_catch_up` of the most
    recent ones; the older ones are one skipped range (see the module docstring)."""
    newest = latest_tick(anchor, interval_blocks, height)
    if newest <= last_written:
        return DueTicks((), None)
    first = max(last_written + 1, newest - max_catch_up + 1)
    skipped = (last_written + 1, first - 1) if first > last_written + 1 else None
    return DueTicks(tuple(range(first, newest + 1)), skipped)


def task_id(stream_id: str, tick: int) -> bytes:
    """The 32-byte id of (stream, tick): the same tick always has the same id."""
    require_int(tick, "tick", minimum=1)
    return hashlib.sha256(cbor.encode({"stream_id": require_text(stream_id, "stream_id"), "tick": tick})).digest()


