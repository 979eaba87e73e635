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
map that is exactly ``{"$bytes": <text>}``. The body's frozen and tagged JSON forms are
`frozen_json`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

import nacl.signing

from watchtower.protocol import cbor
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.command_auth import sign_command_bytes, verify_command_signature
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.frozen_json import BYTES_TAG as BYTES_TAG  # named here too, for the schemas' codecs
from watchtower.protocol.frozen_json import freeze_json, from_tagged_json, hex_bytes, to_tagged_json
from watchtower.protocol.signing import signing_key_from_seed
from watchtower.protocol.validation import require_bytes, require_int, require_text

COMMAND_DOMAIN: Final = "watchtower-command-v1"


class Method(StrEnum):
    """The methods a signed command may name: the StreamActor's (CIP-7 "Actor Interface", plus
    creation, renew_subscription and the ICRC-77 replay methods), the Stream Key Manager's ledger
    and account methods (decided by the account, paid-stream and supply aggregates,
    `protocol.ledger.common`), and three request signatures the key-manager service checks itself (never
    sent to Kafka)."""

    CREATE_STREAM = "create_stream"
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    ROTATE_PUBLISHER_KEY = "rotate_publisher_key"
    SET_SUBSCRIPTION_POLICY = "set_subscription_policy"
    ALLOWLIST_ADD = "allowlist_add"
    ALLOWLIST_REMOVE = "allowlist_remove"
    ANNOUNCE_KEY_EPOCH = "announce_key_epoch"
    RENEW_SUBSCRIPTION = "renew_subscription"
    # ICRC-77 replay control, decided by the stream (protocol.replay.control).
    REGISTER_REPLAY = "register_replay"
    CANCEL_REPLAY = "cancel_replay"
    SET_REPLAY_PRICE = "set_replay_price"
    # CIP-7 ingestion: a failed tick, reported by the delegated publisher key (protocol.ingestion.failure),
    # and the runner registry (protocol.ingestion.runners).
    REPORT_INGEST_FAILURE = "report_ingest_failure"
    REGISTER_RUNNER = "register_runner"
    RETIRE_RUNNER = "retire_runner"
    # Stream Key Manager: account keys, actor authorizations, CBY, epoch access.
    REGISTER_ACCOUNT_KEY = "register_account_key"
    REVOKE_ACCOUNT_KEY = "revoke_account_key"
    AUTHORIZE_ACTOR = "authorize_actor"
    REVOKE_ACTOR = "revoke_actor"
    CREATE_ACTOR = "create_actor"
    APPROVE_SPENDING = "approve_spending"
    REVOKE_SPENDING = "revoke_spending"
    TRANSFER_CBY = "transfer_cby"
    MINT_CBY = "mint_cby"
    BURN_CBY = "burn_cby"
    ACQUIRE_EPOCH_ACCESS = "acquire_epoch_access"
    # Signed requests to the key-manager service's HTTP API; never on a Kafka topic.
    STREAM_ENCRYPT = "stream_encrypt"
    STREAM_DECRYPT = "stream_decrypt"
    FETCH_EPOCH_KEYS = "fetch_epoch_keys"


METHODS: Final = frozenset(m.value for m in Method)


def parse_method(value: object) -> Method:
    """`value` as a Method, else INVALID_ARGUMENT listing the known methods."""
    if isinstance(value, str) and value in METHODS:
        return Method(value)
    raise InvalidArgumentError(f"method must be one of {', '.join(sorted(METHODS))}, got {value!r}")


# --- Signing bytes -------------------------------------------------------------------------------

# The envelope's six keys in deterministic order (by encoded bytes: shorter first, then bytewise),
# so the map is assembled by concatenation; `cbor.encode` of the same map gives the same bytes
# (tests/protocol/test_signing_properties.py checks it on random commands, and cbor2 decodes both).
_ENVELOPE_ORDER: Final = ("body", "nonce", "caller", "domain", "method", "stream_id")
if tuple(sorted(_ENVELOPE_ORDER, key=cbor.encode_text)) != _ENVELOPE_ORDER:  # pragma: no cover
    raise RuntimeError("command envelope key order changed")
_K_BODY, _K_NONCE, _K_CALLER, _K_DOMAIN, _K_METHOD, _K_STREAM_ID = (cbor.encode_text(k) for k in _ENVELOPE_ORDER)
_MAP6_BODY: Final = cbor.encode_head(5, 6) + _K_BODY
_DOMAIN_FIELD: Final = _K_DOMAIN + cbor.encode_text(COMMAND_DOMAIN)


def _encode_body_value(value: Any) -> bytes:
    """Deterministic CBOR of a frozen body value, every float as float64 (never shortened).

    The same bytes as `cbor.encode` of the value with each float wrapped in `cbor.Float64`,
    without building that copy first.
    """
    kind = type(value)
    if kind is str:
        return cbor.encode_text(value)
    if kind is int:
        if not -(2**64) <= value < 2**64:
            raise InvalidArgumentError(f"integer {value} is outside CBOR's 64-bit range")
        return cbor.encode_int(value)
    if kind is float:
        return cbor.encode_float64(value)
    if value is None:
        return cbor.NULL
    if kind is bool:
        return cbor.TRUE if value else cbor.FALSE
    if kind is bytes:
        return cbor.encode_bytes(value)
    if kind is tuple:
        return cbor.encode_head(4, len(value)) + b"".join([_encode_body_value(v) for v in value])
    if isinstance(value, Mapping):
        # Text keys are distinct and UTF-8 is injective, so encoded keys never tie.
        items = sorted([(cbor.encode_text(k), _encode_body_value(v)) for k, v in value.items()])
        return cbor.encode_head(5, len(items)) + b"".join([k + v for k, v in items])
    # Subclasses (a StrEnum, a float64 marker) and values nobody froze: encode what they stand for.
    if isinstance(value, str):
        return cbor.encode_text(str(value))
    if isinstance(value, bool | int | float | bytes | bytearray | memoryview | list | tuple):
        frozen = freeze_json(value)
        return _encode_body_value(frozen if type(frozen) is not type(value) else _plain(frozen))
    raise InvalidArgumentError(f"cannot sign a {kind.__name__} in a command body")


def _plain(value: Any) -> Any:
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return tuple(value) if isinstance(value, list) else bytes(value)


def command_signing_bytes(
    method: str, stream_id: str, caller_public_key: bytes, nonce: int, body: Mapping[str, Any]
) -> bytes:
    """The bytes a caller signs (see the module docstring); INVALID_ARGUMENT for bad fields."""
    frozen = freeze_json(body)
    if not isinstance(frozen, Mapping):
        raise InvalidArgumentError(f"body must be an object, got {type(body).__name__}")
    return b"".join(
        (
            _MAP6_BODY,
            _encode_body_value(frozen),
            _K_NONCE,
            cbor.encode_int(require_int(nonce, "nonce", minimum=1)),
            _K_CALLER,
            cbor.encode_text(address_from_public_key(caller_public_key)),
            _DOMAIN_FIELD,
            _K_METHOD,
            cbor.encode_text(str(parse_method(method))),
            _K_STREAM_ID,
            cbor.encode_text(require_text(stream_id, "stream_id")),
        )
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Command:
    """A signed StreamActor command. Exists ⇒ well-formed and encodable (not necessarily authentic).

    `body` is stored deep-frozen (`FrozenDict`, tuples). `verify_command` checks the signature.
    A publish is the exception to "encodable": its command signature is never checked (its
    message signature authorises it, docs/publish-auth.md), so its signing bytes are built only
    if asked for, and decide checks its body as a StreamMessage instead.
    """

    method: str
    stream_id: str
    caller_public_key: bytes
    nonce: int
    body: Mapping[str, Any]
    signature: bytes
    _signing_bytes: bytes | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

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
        # here proves the body is encodable (e.g. no integer beyond CBOR's 64-bit range). A
        # publish never needs them on the write path (see the class docstring).
        if self.method is not Method.PUBLISH:
            put(self, "_signing_bytes", self._encode())

    def _encode(self) -> bytes:
        return command_signing_bytes(self.method, self.stream_id, self.caller_public_key, self.nonce, self.body)

    @property
    def caller(self) -> str:
        """The caller's address (derived from its public key, so it needs no lookup)."""
        return address_from_public_key(self.caller_public_key)

    @property
    def signing_bytes(self) -> bytes:
        """`command_signing_bytes` of this command (INVALID_ARGUMENT for a publish whose body cannot
        be encoded)."""
        data = self._signing_bytes
        if data is None:
            data = self._encode()
            object.__setattr__(self, "_signing_bytes", data)
        return data

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: keys as fields, bytes as ``*_hex``, body bytes as ``{"$bytes": hex}``."""
        return {
            "method": str(self.method),
            "stream_id": self.stream_id,
            "caller_public_key_hex": self.caller_public_key.hex(),
            "nonce": self.nonce,
            "body": to_tagged_json(self.body),
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
        body = from_tagged_json(data["body"])
        if not isinstance(body, Mapping):
            raise InvalidArgumentError("body must be an object")
        return cls(
            method=data["method"],
            stream_id=data["stream_id"],
            caller_public_key=hex_bytes(data["caller_public_key_hex"], "caller_public_key_hex"),
            nonce=data["nonce"],
            body=body,
            signature=hex_bytes(data["signature_hex"], "signature_hex"),
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


def body_fields(cmd: Command, required: frozenset[str], optional: frozenset[str] = frozenset()) -> Mapping[str, Any]:
    """The command's body, after checking it has every required key and no unknown one
    (INVALID_ARGUMENT naming the missing or unknown fields and the allowed ones)."""
    keys = set(cmd.body)
    missing = required - keys
    if missing:
        raise InvalidArgumentError(f"{cmd.method} needs body field(s) {', '.join(sorted(missing))}")
    unknown = keys - required - optional
    if unknown:
        allowed = ", ".join(sorted(required | optional)) or "none"
        raise InvalidArgumentError(
            f"{cmd.method} does not take body field(s) {', '.join(sorted(unknown))} (allowed: {allowed})"
        )
    return cmd.body


def verify_command(cmd: Command) -> None:
    """Raise `InvalidSignatureError` unless the caller's key signed exactly this command."""
    verify_command_signature(caller=cmd.caller, signing_bytes=cmd.signing_bytes, signature=cmd.signature)


def command_digest(cmd: Command) -> bytes:
    """SHA-256 of the signing bytes: equal digests mean the same request (idempotent retries)."""
    return hashlib.sha256(cmd.signing_bytes).digest()
