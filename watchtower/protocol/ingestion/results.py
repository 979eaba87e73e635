"""A runner's result as the ingestion rules see it: canonical JSON bytes, checked against the
stream's ``result_schema`` with a maintained JSON Schema validator (`jsonschema`, Draft 2020-12).

Canonical JSON (keys sorted, no whitespace, UTF-8, no NaN/Infinity, integers within ±(2^53 − 1))
is what a runner signs and what QUORUM compares byte for byte, so two runners that saw the same
value produce the same bytes whatever order their source listed the keys in.

`jsonschema` is pure Python with no I/O here: remote ``$ref`` resolution is disabled (a schema
that refers outside itself is refused), so checking a result never fetches anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the lock; pyproject is not ours to change
import jsonschema.exceptions  # type: ignore[import-untyped]
import referencing
import referencing.exceptions

from watchtower.protocol.errors import InvalidArgumentError, SchemaMismatchError
from watchtower.protocol.frozen_json import to_tagged_json
from watchtower.protocol.ingestion.common import MAX_RESULT_BYTES, check_json_ints

_VALIDATOR = jsonschema.Draft202012Validator


def canonical_json(value: Any) -> bytes:
    """The canonical JSON bytes of `value` (INVALID_ARGUMENT for NaN/Inf, unsafe ints or non-JSON)."""
    check_json_ints(value)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"a result must be plain JSON (no NaN or Infinity): {exc}") from None


def parse_result(data: bytes) -> Any:
    """The JSON value of canonical bytes `data` (MALFORMED-free: INVALID_ARGUMENT when not canonical)."""
    if len(data) > MAX_RESULT_BYTES:
        raise InvalidArgumentError(f"a result is at most {MAX_RESULT_BYTES} bytes of JSON, got {len(data)}")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgumentError(f"a result must be UTF-8 JSON: {exc}") from None
    if canonical_json(value) != data:
        raise InvalidArgumentError("a result must be canonical JSON (sorted keys, no whitespace)")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_remote(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(uri)


_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_no_remote)  # type: ignore[call-arg]


def check_result_schema(schema: Mapping[str, Any]) -> None:
    """INVALID_ARGUMENT unless `schema` is a valid Draft 2020-12 JSON Schema object."""
    _validator(canonical_json(to_tagged_json(schema)).decode())


@lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    try:
        _VALIDATOR.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise InvalidArgumentError(f"ingestion.result_schema is not a valid JSON Schema: {exc.message}") from None
    return _VALIDATOR(schema, registry=_REGISTRY)


@lru_cache(maxsize=256)
def _validator_of_text(schema_json: str) -> Any:
    return _validator(canonical_json(to_tagged_json(json.loads(schema_json))).decode())


def validate_result(value: Any, schema: Mapping[str, Any] | str) -> None:
    """SCHEMA_MISMATCH naming the first failing place unless `value` satisfies `schema` (a JSON
    Schema, or its JSON text as a task carries it: read once per distinct text)."""
    validator = _validator_of_text(schema) if isinstance(schema, str) else _validator(
        canonical_json(to_tagged_json(schema)).decode())
    try:
        if validator.is_valid(value):  # the common case, without collecting errors
            return
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        raise SchemaMismatchError(f"result_schema refers to {exc}, which is not resolvable offline") from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(the result)"
        raise SchemaMismatchError(f"the result does not match result_schema at {where}: {error.message}")
