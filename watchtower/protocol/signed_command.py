"""The signed command envelope the StreamActor aggregate decides on.

A `Command` names a StreamActor method, the stream it targets, the caller's ed25519 public key, a
per-(caller, stream) nonce, a JSON-like body and the caller's signature over the *command signing
bytes*:

    deterministic CBOR of {"domain": "watchtower-command-v1", "method": <text>,
                           "stream_id": <text>, "caller": <address>, "nonce": <uint>,
                           "body": <map>}

Body values are JSON-like: text, int, float, bool, null, bytes, arrays and text-keyed maps. In the
signing bytes ints stay (shortest-form) ints and every float is CBOR float64, never shortened, so
``1`` and ``1.0`` are different commands and a float survives any JSON hop bit for bit. NaN and
±Inf are refused (INVALID_ARGUMENT), like every other value CBOR or JSON cannot carry exactly.

This is the one command envelope: the SDK, the CLI, the HTTP API and the workers all sign and
check these bytes. The stream id is signed, so a command cannot be
replayed against another stream either; that is why nonces only need to increase per
(caller, stream).

JSON form (`to_dict`): byte fields are lowercase hex under ``*_hex`` names; bytes inside the body
become ``{"$bytes": "<hex>"}``. To keep that mapping one-to-one, a body may not itself contain a
map that is exactly ``{"$bytes": <text>}``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, Final

import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.command_auth import sign_command_bytes, verify_command_signature
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.signing import signing_key_from_seed
from watchtower.protocol.validation import require_bytes, require_int, require_text

COMMAND_DOMAIN: Final = "watchtower-command-v1"
BYTES_TAG: Final = "$bytes"
# Bodies nest a few levels at most (a filter is depth 4 inside one map); the bound keeps hostile
# input from turning into a RecursionError.
MAX_BODY_DEPTH: Final = 32


class Method(StrEnum):
    """The StreamActor methods a signed command may name (CIP-7 "Actor Interface", plus creation)."""

    CREATE_STREAM = "create_stream"
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    ROTATE_PUBLISHER_KEY = "rotate_publisher_key"
    SET_SUBSCRIPTION_POLICY = "set_subscription_policy"
    ALLOWLIST_ADD = "allowlist_add"
    ALLOWLIST_REMOVE = "allowlist_remove"
    ANNOUNCE_KEY_EPOCH = "announce_key_epoch"


METHODS: Final = frozenset(m.value for m in Method)


def parse_method(value: object) -> Method:
    """`value` as a Method, else INVALID_ARGUMENT listing the known methods."""
    if isinstance(value, str) and value in METHODS:
        return Method(value)
    raise InvalidArgumentError(f"method must be one of {', '.join(sorted(METHODS))}, got {value!r}")


# --- Frozen JSON-like values ---------------------------------------------------------------------


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

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (self._data,))


def freeze_json(value: object, name: str = "body", _depth: int = 0) -> Any:
    """A deep, immutable copy of a JSON-like value; INVALID_ARGUMENT naming the bad part.

    Maps become `FrozenDict`, arrays tuples, bytes-likes bytes. Floats must be finite; map keys
    must be text; ``{"$bytes": <text>}`` is reserved for the JSON form of bytes.
    """
    if _depth > MAX_BODY_DEPTH:
        raise InvalidArgumentError(f"{name} nests deeper than {MAX_BODY_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{name} is {value!r}; NaN and ±Inf cannot be signed or sent as JSON")
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, list | tuple):
        return tuple(freeze_json(v, f"{name}[{i}]", _depth + 1) for i, v in enumerate(value))
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgumentError(f"{name} has a non-text key {key!r}; JSON object keys are text")
            out[key] = freeze_json(item, f"{name}.{key}", _depth + 1)
        if len(out) == 1 and isinstance(out.get(BYTES_TAG), str):
            raise InvalidArgumentError(f'{name} is {{"{BYTES_TAG}": …}}, which is reserved for encoding bytes')
        return FrozenDict(out)
    raise InvalidArgumentError(
        f"{name} is a {type(value).__name__}; use text, numbers, bools, null, bytes, arrays or objects"
    )


def json_safe(value: Any) -> Any:
    """The JSON form of a frozen value: plain dicts and lists, bytes as ``{"$bytes": hex}``."""
    if isinstance(value, bytes):
        return {BYTES_TAG: value.hex()}
    if isinstance(value, tuple | list):
        return [json_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def from_json_safe(value: object, name: str = "body") -> Any:
    """Inverse of `json_safe`, frozen; INVALID_ARGUMENT on anything `json_safe` cannot produce."""
    return freeze_json(_unwrap_bytes(value, name, 0), name)


def _unwrap_bytes(value: object, name: str, depth: int) -> object:
    if depth > MAX_BODY_DEPTH:
        raise InvalidArgumentError(f"{name} nests deeper than {MAX_BODY_DEPTH} levels")
    if isinstance(value, list | tuple):
        return [_unwrap_bytes(v, f"{name}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if len(value) == 1 and BYTES_TAG in value:
            hex_text = value[BYTES_TAG]
            if not isinstance(hex_text, str):
                raise InvalidArgumentError(f'{name}: "{BYTES_TAG}" must hold a hex string')
            return _hex(hex_text, name)
        return {k: _unwrap_bytes(v, f"{name}.{k}", depth + 1) for k, v in value.items()}
    return value


def _hex(text: object, name: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be a hex string, got {type(text).__name__}")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidArgumentError(f"{name} is not valid hex") from None


def _for_signing(value: Any) -> Any:
    # Only floats need help: cbor.encode would shorten them, the envelope pins float64.
    if type(value) is float:
        return cbor.Float64(value)
    if isinstance(value, tuple):
        return [_for_signing(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _for_signing(v) for k, v in value.items()}
    return value


# --- Signing bytes -------------------------------------------------------------------------------


def command_signing_bytes(
    method: str, stream_id: str, caller_public_key: bytes, nonce: int, body: Mapping[str, Any]
) -> bytes:
    """The bytes a caller signs (see the module docstring); INVALID_ARGUMENT for bad fields."""
    frozen = freeze_json(body)
    if not isinstance(frozen, Mapping):
        raise InvalidArgumentError(f"body must be an object, got {type(body).__name__}")
    return cbor.encode(
        {
            "domain": COMMAND_DOMAIN,
            "method": str(parse_method(method)),
            "stream_id": require_text(stream_id, "stream_id"),
            "caller": address_from_public_key(caller_public_key),
            "nonce": require_int(nonce, "nonce", minimum=1),
            "body": _for_signing(frozen),
        }
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Command:
    """A signed StreamActor command. Exists ⇒ well-formed and encodable (not necessarily authentic).

    `body` is stored deep-frozen (`FrozenDict`, tuples). `verify_command` checks the signature.
    """

    method: str
    stream_id: str
    caller_public_key: bytes
    nonce: int
    body: Mapping[str, Any]
    signature: bytes
    _signing_bytes: bytes = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "method", parse_method(self.method))
        put(self, "stream_id", require_text(self.stream_id, "stream_id"))
        put(
            self,
            "caller_public_key",
            require_bytes(self.caller_public_key, "caller_public_key", length=ED25519_PUBLIC_KEY_BYTES),
        )
        put(self, "nonce", require_int(self.nonce, "nonce", minimum=1))
        if not isinstance(self.body, Mapping):
            raise InvalidArgumentError(f"body must be an object, got {type(self.body).__name__}")
        put(self, "body", freeze_json(self.body))
        put(self, "signature", require_bytes(self.signature, "signature"))
        # Computed once: decide needs the bytes twice (signature and digest), and computing them
        # here proves the body is encodable (e.g. no integer beyond CBOR's 64-bit range).
        put(
            self,
            "_signing_bytes",
            command_signing_bytes(self.method, self.stream_id, self.caller_public_key, self.nonce, self.body),
        )

    @property
    def caller(self) -> str:
        """The caller's address (derived from its public key, so it needs no lookup)."""
        return address_from_public_key(self.caller_public_key)

    @property
    def signing_bytes(self) -> bytes:
        """`command_signing_bytes` of this command."""
        return self._signing_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: keys as fields, bytes as ``*_hex``, body bytes as ``{"$bytes": hex}``."""
        return {
            "method": str(self.method),
            "stream_id": self.stream_id,
            "caller_public_key_hex": self.caller_public_key.hex(),
            "nonce": self.nonce,
            "body": json_safe(self.body),
            "signature_hex": self.signature.hex(),
        }

    @classmethod
    def from_dict(cls, data: object) -> Command:
        """Inverse of `to_dict`; every failure is INVALID_ARGUMENT naming the field."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a command must be an object, got {type(data).__name__}")
        unknown = set(data) - _COMMAND_JSON_KEYS
        if unknown:
            raise InvalidArgumentError(f"unknown command field(s): {', '.join(sorted(map(str, unknown)))}")
        missing = _COMMAND_JSON_KEYS - set(data)
        if missing:
            raise InvalidArgumentError(f"missing command field(s): {', '.join(sorted(missing))}")
        body = from_json_safe(data["body"])
        if not isinstance(body, Mapping):
            raise InvalidArgumentError("body must be an object")
        return cls(
            method=data["method"],
            stream_id=data["stream_id"],
            caller_public_key=_hex(data["caller_public_key_hex"], "caller_public_key_hex"),
            nonce=data["nonce"],
            body=body,
            signature=_hex(data["signature_hex"], "signature_hex"),
        )


_COMMAND_JSON_KEYS: Final = frozenset(
    {"method", "stream_id", "caller_public_key_hex", "nonce", "body", "signature_hex"}
)


def sign_command(
    signing_key: nacl.signing.SigningKey | bytes,
    method: str,
    stream_id: str,
    nonce: int,
    body: Mapping[str, Any],
) -> Command:
    """A command signed by `signing_key` (a SigningKey or its 32-byte seed); the caller is its address."""
    key = signing_key if isinstance(signing_key, nacl.signing.SigningKey) else signing_key_from_seed(signing_key)
    public_key = bytes(key.verify_key)
    data = command_signing_bytes(method, stream_id, public_key, nonce, body)
    return Command(method, stream_id, public_key, nonce, body, sign_command_bytes(data, key))


def verify_command(cmd: Command) -> None:
    """Raise `InvalidSignatureError` unless the caller's key signed exactly this command."""
    verify_command_signature(caller=cmd.caller, signing_bytes=cmd.signing_bytes, signature=cmd.signature)


def command_digest(cmd: Command) -> bytes:
    """SHA-256 of the signing bytes: equal digests mean the same request (idempotent retries)."""
    return hashlib.sha256(cmd.signing_bytes).digest()
