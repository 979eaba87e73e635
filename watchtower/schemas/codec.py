"""Framed Avro encoding for every Watchtower record, with explicit upcasting of old versions.

Wire format of a framed record (what goes into a Kafka record value)::

    byte 0      magic 0x57 ("W")          -- never 0x00, so it cannot be taken for Confluent framing
    bytes 1-2   schema id, big-endian u16 -- stable id from `schema_ids.CATALOG`
    bytes 3-4   schema version, u16       -- which ``<Name>.v<N>.avsc`` wrote the body
    bytes 5-    Avro binary body (schemaless, as Spark's `from_avro` expects after `substring(value, 6)`)

Failure contract: `decode` raises only `MalformedRecordError` (bytes that are not a readable record:
short, bad magic, truncated or trailing Avro) or `SchemaMismatchError` (a schema this build does not
have, a version with no upcast path, or a record of another type than expected). `encode`
raises only `SchemaMismatchError` (unknown name or a record that does not fit the schema).

Upcasting old versions
----------------------
Schemas are never edited in place. To change ``Foo`` from v1 to v2:

1. add ``Foo.v2.avsc`` (record name ``watchtower.v2.Foo``) beside ``Foo.v1.avsc``, keeping v1;
2. register a pure function turning a v1 record dict into a valid v2 record dict::

       @register_upcaster("Foo", 1)
       def _foo_v1_to_v2(old: dict) -> dict:
           return {**old, "new_field": None}

3. encoders now write v2 (the latest); `decode` reads a v1 record with the v1 schema, then
   applies the v1→v2 upcaster (and v2→v3, … in order) and validates the result against the
   latest schema. Consumers therefore only ever see the latest shape, while `Decoded.version`
   still says what the producer wrote. A missing step is a `SchemaMismatchError`, never a guess.

Upcasters live next to the code that owns the record type and must be registered at import
time of that module, before any decode.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import io
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any, Final

import fastavro
import fastavro.validation

from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, SchemaMismatchError
from watchtower.schemas.schema_ids import BY_ID, CATALOG

MAGIC: Final = 0x57
_HEADER: Final = struct.Struct(">BHH")
HEADER_BYTES: Final = _HEADER.size
_FILE_RE: Final = re.compile(r"([A-Za-z][A-Za-z0-9]*)\.v([0-9]+)\.avsc")

Record = dict[str, Any]
Upcaster = Callable[[Record], Record]

_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded record: its schema name, the version the producer wrote, and the record
    upcast to the latest version."""

    name: str
    version: int
    record: Record


@dataclasses.dataclass(frozen=True, slots=True)
class _Schemas:
    raw: dict[tuple[str, int], dict[str, Any]]  # the .avsc JSON as written
    parsed: dict[tuple[str, int], Any]  # fastavro-parsed, ready to read/write
    named_raw: dict[str, dict[str, Any]]  # every named type's JSON by full name
    latest: dict[str, int]


@functools.cache
def _schemas() -> _Schemas:
    files: dict[tuple[str, int], dict[str, Any]] = {}
    for entry in resources.files("watchtower.schemas").iterdir():
        match = _FILE_RE.fullmatch(entry.name)
        if match is None:
            continue
        name, version = match.group(1), int(match.group(2))
        if name not in CATALOG:
            raise RuntimeError(f"schema file {entry.name} has no catalogue entry")
        raw = json.loads(entry.read_text(encoding="utf-8"))
        if raw.get("name") != name or raw.get("namespace") != f"watchtower.v{version}":
            raise RuntimeError(f"{entry.name} must define record watchtower.v{version}.{name}")
        files[(name, version)] = raw
    # Every file is self-contained (an outside reader needs that one file alone), so each is
    # parsed on its own: a named type inlined in several files (EventOrigin) is defined per file.
    parsed = {key: fastavro.parse_schema(copy.deepcopy(raw), named_schemas={}) for key, raw in files.items()}
    named_raw: dict[str, dict[str, Any]] = {}
    for raw in files.values():
        _collect_named(raw, named_raw, raw.get("namespace", ""))
    latest: dict[str, int] = {}
    for name, version in files:
        latest[name] = max(latest.get(name, 0), version)
    missing = set(CATALOG) - set(latest)
    if missing:
        raise RuntimeError(f"catalogued schemas without a file: {sorted(missing)}")
    return _Schemas(files, parsed, named_raw, latest)


def _collect_named(node: Any, out: dict[str, dict[str, Any]], namespace: str) -> None:
    if isinstance(node, list):
        for item in node:
            _collect_named(item, out, namespace)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") in ("record", "enum", "fixed") and "name" in node:
        ns = node.get("namespace", namespace)
        full = node["name"] if "." in node["name"] else f"{ns}.{node['name']}"
        out[full] = node
        namespace = ns
    for key in ("fields", "type", "items", "values"):
        if key in node:
            _collect_named(node[key], out, namespace)


def latest_version(name: str) -> int:
    """The newest version of schema `name` (what `encode` writes)."""
    _require_known(name)
    return _schemas().latest[name]


def schema_names() -> tuple[str, ...]:
    """Every catalogued schema name."""
    return tuple(CATALOG)


def _require_known(name: str) -> None:
    if not isinstance(name, str) or name not in CATALOG:
        raise SchemaMismatchError(f"no schema named {name!r}; known schemas: {', '.join(sorted(CATALOG))}")


def _parsed(name: str, version: int) -> Any:
    _require_known(name)
    try:
        return _schemas().parsed[(name, version)]
    except KeyError:
        raise SchemaMismatchError(
            f"{name} v{version} is not a schema this build has (latest is v{latest_version(name)}); "
            f"upgrade this consumer."
        ) from None


def avro_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The fully expanded Avro schema JSON of `name` (every named type inlined once).

    This is what Spark's `from_avro(col, json.dumps(avro_schema(name)))` needs.
    """
    v = latest_version(name) if version is None else version
    _parsed(name, v)
    return _expand(copy.deepcopy(_schemas().raw[(name, v)]), set(), "")


def _expand(node: Any, defined: set[str], namespace: str) -> Any:
    if isinstance(node, str):
        full = node if "." in node else f"{namespace}.{node}"
        named = _schemas().named_raw.get(full)
        if named is None or full in defined:
            return node
        return _expand(copy.deepcopy(named), defined, full.rsplit(".", 1)[0])
    if isinstance(node, list):
        return [_expand(item, defined, namespace) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") in ("record", "enum", "fixed"):
        namespace = node.get("namespace", namespace)
        defined.add(node["name"] if "." in node["name"] else f"{namespace}.{node['name']}")
    if "fields" in node:
        node["fields"] = [{**fld, "type": _expand(fld["type"], defined, namespace)} for fld in node["fields"]]
    for key in ("type", "items", "values"):
        if key in node and not (key == "type" and node[key] in ("record", "enum", "fixed", "map", "array")):
            node[key] = _expand(node[key], defined, namespace)
    return node


# --- Encoding --------------------------------------------------------------------------------------


def encode_body(name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
    """Avro binary of `record` under `name`'s schema, without the frame header."""
    v = latest_version(name) if version is None else version
    return _write(_parsed(name, v), _schemas().raw[(name, v)], record, f"{name} v{v}", f"watchtower.v{v}")


def _write(parsed: Any, raw: dict[str, Any], record: Mapping[str, Any], label: str, namespace: str) -> bytes:
    prepared = _prepare(raw, record, label, namespace)
    try:
        fastavro.validation.validate(prepared, parsed, raise_errors=True)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, prepared, strict=True)
    except Exception as exc:  # fastavro raises ValidationError, TypeError, OverflowError, ...
        raise SchemaMismatchError(f"record does not fit {label}: {_short(exc)}") from None
    return out.getvalue()


def encode(name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
    """Frame header + Avro body. Writes the latest version unless `version` is given."""
    v = latest_version(name) if version is None else version
    body = encode_body(name, record, version=v)
    return _HEADER.pack(MAGIC, CATALOG[name].schema_id, v) + body


def frame(name: str) -> tuple[bytes, Any]:
    """(frame header, parsed schema) of `name`'s latest version, for encoders on the hot path.

    `encode` checks a record field by field with readable messages; an encoder that builds its
    records from typed classes (`events`) already has the exact shape, so it writes
    ``header + schemaless_writer(parsed, record)`` directly and skips that second check.
    """
    return _frame(name)


@functools.cache
def _frame(name: str) -> tuple[bytes, Any]:
    v = latest_version(name)
    return _HEADER.pack(MAGIC, CATALOG[name].schema_id, v), _parsed(name, v)


def _prepare(schema: Any, datum: Any, path: str, namespace: str) -> Any:
    """Copy of `datum` with record defaults filled in; unknown or missing fields are reported by path."""
    if isinstance(schema, str):
        full = schema if "." in schema else f"{namespace}.{schema}"
        named = _schemas().named_raw.get(full)
        return datum if named is None else _prepare(named, datum, path, full.rsplit(".", 1)[0])
    if isinstance(schema, list):
        if isinstance(datum, Mapping):
            records = [s for s in schema if _is_record(s, namespace)]
            if len(records) == 1:
                return _prepare(records[0], datum, path, namespace)
        return datum
    if not isinstance(schema, dict):
        return datum
    kind = schema.get("type")
    if kind == "record":
        namespace = schema.get("namespace", namespace)
        if not isinstance(datum, Mapping):
            raise SchemaMismatchError(f"{path} must be a record (dict), got {type(datum).__name__}")
        names = [fld["name"] for fld in schema["fields"]]
        unknown = set(datum) - set(names)
        if unknown:
            raise SchemaMismatchError(f"{path} has unknown field(s) {sorted(map(str, unknown))}")
        out: Record = {}
        for fld in schema["fields"]:
            fname = fld["name"]
            if fname in datum:
                out[fname] = _prepare(fld["type"], datum[fname], f"{path}.{fname}", namespace)
            elif "default" in fld:
                out[fname] = copy.deepcopy(fld["default"])
            else:
                raise SchemaMismatchError(f"{path} is missing field {fname!r}")
        return out
    if kind == "map" and isinstance(datum, Mapping):
        return {k: _prepare(schema["values"], v, f"{path}[{k!r}]", namespace) for k, v in datum.items()}
    if kind == "array" and isinstance(datum, list | tuple):
        return [_prepare(schema["items"], v, f"{path}[{i}]", namespace) for i, v in enumerate(datum)]
    if isinstance(kind, list | dict):
        return _prepare(kind, datum, path, namespace)
    return datum


def _is_record(schema: Any, namespace: str) -> bool:
    if isinstance(schema, str):
        full = schema if "." in schema else f"{namespace}.{schema}"
        schema = _schemas().named_raw.get(full, {})
    return isinstance(schema, dict) and schema.get("type") == "record"


# --- Decoding --------------------------------------------------------------------------------------


def read_header(data: bytes) -> tuple[str, int]:
    """(schema name, version) of a framed record, without decoding the body."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MalformedRecordError(f"a framed record is bytes, got {type(data).__name__}")
    if len(data) < HEADER_BYTES:
        raise MalformedRecordError(f"a framed record has a {HEADER_BYTES}-byte header; got {len(data)} bytes")
    magic, schema_id, version = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise MalformedRecordError(
            f"first byte is 0x{magic:02x}, not the Watchtower magic 0x{MAGIC:02x}: this is not a "
            f"Watchtower record (or it was produced with another serializer)"
        )
    info = BY_ID.get(schema_id)
    if info is None:
        raise SchemaMismatchError(f"schema id {schema_id} is unknown to this build; upgrade this consumer")
    return info.name, version


def decode_body(name: str, body: bytes, version: int) -> Record:
    """Decode an unframed Avro body written with `name` v`version` (no upcasting)."""
    schema = _parsed(name, version)
    stream = io.BytesIO(body)
    try:
        record = fastavro.schemaless_reader(stream, schema)
    except Exception as exc:  # EOFError, UnicodeDecodeError, IndexError, MemoryError, ...
        raise MalformedRecordError(f"{name} v{version} body is unreadable: {_short(exc)}") from None
    if stream.tell() != len(body):
        raise MalformedRecordError(f"{name} v{version} body has {len(body) - stream.tell()} trailing byte(s)")
    if not isinstance(record, dict):
        raise MalformedRecordError(f"{name} v{version} body is not a record")
    return record


def decode(data: bytes, *, expect: str | Iterable[str] | None = None) -> Decoded:
    """Decode a framed record, upcasting it to the latest version of its schema.

    `expect` restricts the accepted schema names (SchemaMismatchError otherwise).
    """
    name, version = read_header(data)
    if expect is not None:
        allowed = {expect} if isinstance(expect, str) else set(expect)
        if name not in allowed:
            raise SchemaMismatchError(f"expected {' or '.join(sorted(allowed))}, got a {name} record")
    record = decode_body(name, bytes(data[HEADER_BYTES:]), version)
    return Decoded(name, version, upcast(name, version, record))


def decode_as(name: str, data: bytes) -> Record:
    """The latest-version record of a framed `name` record (SchemaMismatchError for any other type)."""
    return decode(data, expect=name).record


# --- Upcasting -------------------------------------------------------------------------------------


def register_upcaster(
    name: str, from_version: int, fn: Upcaster | None = None
) -> Upcaster | Callable[[Upcaster], Upcaster]:
    """Register `fn` to turn a `name` v`from_version` record into a v`from_version + 1` record.

    Usable directly or as a decorator. See the module docstring for the whole path.
    """
    _require_known(name)
    if not isinstance(from_version, int) or from_version < 1:
        raise InvalidArgumentError("from_version must be an integer ≥ 1")

    def register(func: Upcaster) -> Upcaster:
        key = (name, from_version)
        if key in _UPCASTERS and _UPCASTERS[key] is not func:
            raise InvalidArgumentError(f"an upcaster from {name} v{from_version} is already registered")
        _UPCASTERS[key] = func
        return func

    return register if fn is None else register(fn)


def upcast(name: str, version: int, record: Record) -> Record:
    """`record` (written as `name` v`version`) carried to the latest version by the registered upcasters."""
    latest = _schemas().latest[name]
    if version > latest:
        raise SchemaMismatchError(f"{name} v{version} is newer than this build (v{latest}); upgrade this consumer")
    if version == latest:
        return record
    for step in range(version, latest):
        fn = _UPCASTERS.get((name, step))
        if fn is None:
            raise SchemaMismatchError(
                f"no upcaster from {name} v{step} to v{step + 1}; register one with register_upcaster"
            )
        try:
            record = fn(copy.deepcopy(record))
        except Exception as exc:
            raise SchemaMismatchError(f"upcasting {name} v{step} to v{step + 1} failed: {_short(exc)}") from None
    try:
        fastavro.validation.validate(record, _parsed(name, latest), raise_errors=True)
    except Exception as exc:
        raise SchemaMismatchError(f"upcast {name} record does not fit v{latest}: {_short(exc)}") from None
    return record


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
