"""Frozen JSON-like values: the deep-immutable form of a command body, and its tagged JSON form.

A body value is text, int, float, bool, null, bytes, an array or a text-keyed map. `freeze_json`
makes a deep, immutable, hashable copy of one (maps become `FrozenDict`, arrays tuples, bytes-likes
bytes) or raises INVALID_ARGUMENT naming the bad part: a non-finite float (NaN, ±Inf), a non-text
map key, nesting deeper than `MAX_BODY_DEPTH`, or a value JSON and CBOR cannot carry exactly.

The tagged JSON form (`to_tagged_json`, inverted by `from_tagged_json`) carries bytes as
``{"$bytes": "<hex>"}``; to keep that mapping one-to-one, a frozen value may not itself contain a
map that is exactly ``{"$bytes": <text>}``. `signed_command` signs and sends values in these forms.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Final

from watchtower.protocol.errors import InvalidArgumentError

BYTES_TAG: Final = "$bytes"
# Bodies nest a few levels at most (a filter is depth 4 inside one map); the bound keeps hostile
# input from turning into a RecursionError.
MAX_BODY_DEPTH: Final = 32


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable, picklable text-keyed map: the frozen form of a JSON object."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data) if data else {}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    # The dict's own (read-only) views: Mapping's generic ones call __getitem__ per key in Python.
    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def items(self) -> ItemsView[str, Any]:
        return self._data.items()

    def values(self) -> ValuesView[Any]:
        return self._data.values()

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (self._data,))


class _DeepFrozenDict(FrozenDict):
    """A FrozenDict that `freeze_json` built, so every value inside it is frozen too.

    Only `freeze_json` creates these (anyone may build a plain FrozenDict around a mutable list),
    which lets it return one unchanged instead of walking it again: a command's body is frozen
    once on decoding, not again by the constructor. Pickles as a plain FrozenDict.
    """

    __slots__ = ()


def _deep_frozen(data: dict[str, Any]) -> _DeepFrozenDict:
    frozen = _DeepFrozenDict.__new__(_DeepFrozenDict)
    frozen._data = data
    return frozen


_SCALARS: Final = frozenset({str, int, bool, type(None)})


def freeze_json(value: object, name: str = "body", _depth: int = 0) -> Any:
    """A deep, immutable copy of a JSON-like value; INVALID_ARGUMENT naming the bad part.

    Maps become `FrozenDict`, arrays tuples, bytes-likes bytes. Floats must be finite; map keys
    must be text; ``{"$bytes": <text>}`` is reserved for the JSON form of bytes. A map this
    function already froze is returned as it is.
    """
    kind = type(value)
    if kind in _SCALARS or kind is bytes or kind is _DeepFrozenDict:
        return value
    return _freeze(value, name, _depth, unwrap=False)


def _freeze(value: object, name: str, depth: int, *, unwrap: bool) -> Any:
    # One walk for both entry points: `unwrap` also turns {"$bytes": hex} back into bytes (the
    # JSON form's inverse), which then leaves no reserved map behind to refuse.
    if depth > MAX_BODY_DEPTH:
        raise InvalidArgumentError(f"{name} nests deeper than {MAX_BODY_DEPTH} levels")
    kind = type(value)
    if kind in _SCALARS or kind is bytes or kind is _DeepFrozenDict:
        return value
    if kind is float:
        if value - value != 0.0:  # type: ignore[operator]  # NaN and ±Inf (inf - inf is NaN)
            raise InvalidArgumentError(f"{name} is {value!r}; NaN and ±Inf cannot be signed or sent as JSON")
        return value
    if kind is dict or isinstance(value, Mapping):
        items: Mapping[Any, Any] = value  # type: ignore[assignment]
        if unwrap and len(items) == 1 and BYTES_TAG in items:
            hex_text = items[BYTES_TAG]
            if not isinstance(hex_text, str):
                raise InvalidArgumentError(f'{name}: "{BYTES_TAG}" must hold a hex string')
            return hex_bytes(hex_text, name)
        out: dict[str, Any] = {}
        inline = depth < MAX_BODY_DEPTH  # a scalar child sits one level deeper
        for key, item in items.items():
            if type(key) is not str:
                if not isinstance(key, str):
                    raise InvalidArgumentError(f"{name} has a non-text key {key!r}; JSON object keys are text")
                key = str(key)
            item_kind = type(item)
            if inline and (item_kind is str or item_kind is int or item_kind is bool or item is None):
                out[key] = item
            else:
                out[key] = _freeze(item, f"{name}.{key}", depth + 1, unwrap=unwrap)
        if len(out) == 1 and isinstance(out.get(BYTES_TAG), str):
            raise InvalidArgumentError(f'{name} is {{"{BYTES_TAG}": …}}, which is reserved for encoding bytes')
        return _deep_frozen(out)
    if isinstance(value, list | tuple):
        return tuple(_freeze(v, f"{name}[{i}]", depth + 1, unwrap=unwrap) for i, v in enumerate(value))
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _freeze(float(value), name, depth, unwrap=unwrap)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidArgumentError(
        f"{name} is a {type(value).__name__}; use text, numbers, bools, null, bytes, arrays or objects"
    )


def to_tagged_json(value: Any) -> Any:
    """The JSON form of a frozen value: plain dicts and lists, bytes as ``{"$bytes": hex}``."""
    if isinstance(value, bytes):
        return {BYTES_TAG: value.hex()}
    if isinstance(value, tuple | list):
        return [to_tagged_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_tagged_json(v) for k, v in value.items()}
    return value


def from_tagged_json(value: object, name: str = "body") -> Any:
    """Inverse of `to_tagged_json`, frozen; INVALID_ARGUMENT on anything `to_tagged_json` cannot produce."""
    return _freeze(value, name, 0, unwrap=True)


def hex_bytes(text: object, name: str) -> bytes:
    """`text` as bytes from hex; INVALID_ARGUMENT naming `name` otherwise."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be a hex string, got {type(text).__name__}")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidArgumentError(f"{name} is not valid hex") from None
