"""The readers of a signed command's body values: a value and its field's name in, a typed value
(or the error the client is told) out.

A body class in `commands` names its field's reader in the field's type, ``Annotated[T, reader]``
(or one of the aliases below), and `commands.read_body` calls it. A reader checks only the value
itself; what a value means against the state is its rule's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import ACCOUNT_KEY_SCHEME_X25519, MAX_WIRE_UINT64, X25519_PUBLIC_KEY_BYTES
from watchtower.protocol.enums import DeliveryMode, SubscriptionPolicy
from watchtower.protocol.errors import InvalidAccountKeyError, InvalidArgumentError
from watchtower.protocol.validation import require_amount, require_bytes, require_int, require_text

Reader = Callable[[Any, str], Any]


def int_in(*, minimum: int = 0, maximum: int = MAX_WIRE_UINT64) -> Reader:
    """An integer in [minimum, maximum] (by default, up to the largest the wire carries)."""
    return lambda value, name: require_int(value, name, minimum=minimum, maximum=maximum)


def nullable(read: Reader) -> Reader:
    """`read`'s value, or None for an explicit null."""
    return lambda value, name: None if value is None else read(value, name)


def text(*, allow_empty: bool = False) -> Reader:
    return lambda value, name: require_text(value, name, allow_empty=allow_empty)


def short_text(limit: int) -> Reader:
    """Text of at most `limit` characters (empty allowed)."""
    def read(value: object, name: str) -> str:
        if not isinstance(value, str) or len(value) > limit:
            raise InvalidArgumentError(f"{name} must be text of at most {limit} characters")
        return value
    return read


def raw_bytes(value: object, name: str) -> bytes:
    return require_bytes(value, name)


def flag(value: object, name: str) -> bool:
    if value is not True and value is not False:
        raise InvalidArgumentError(f"{name} must be true or false")
    return value


def positive_id(value: object, name: str) -> int:
    if type(value) is not int or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value


def subscription_policy(value: Any, name: str) -> SubscriptionPolicy:
    try:
        return SubscriptionPolicy(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be PUBLIC or PRIVATE_ALLOWLIST, got {value!r}") from None


def delivery_mode(value: Any, name: str) -> DeliveryMode:
    try:
        return DeliveryMode(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be PUSH, PULL or PUSH_WITH_PULL_FALLBACK, got {value!r}") from None


def account_key_scheme(value: object, name: str) -> str:
    if value != ACCOUNT_KEY_SCHEME_X25519:
        raise InvalidAccountKeyError(f"{name} must be {ACCOUNT_KEY_SCHEME_X25519} (the only CIP-7 v1 scheme), "
                                     f"got {value!r}")
    return ACCOUNT_KEY_SCHEME_X25519


def x25519_public_key(value: object, name: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != X25519_PUBLIC_KEY_BYTES:
        raise InvalidAccountKeyError(f"{name} must be the {X25519_PUBLIC_KEY_BYTES}-byte X25519 public key "
                                     "(send it as bytes)")
    return value


Address = Annotated[str, require_address]
"""An account or actor address (`addresses.require_address`)."""
Amount = Annotated[int, require_amount]
"""An amount of CBY wei, 1..2**63-1 (`validation.require_amount`)."""
Count = Annotated[int, int_in()]
"""An integer from 0 to the largest the wire carries."""
Text = Annotated[str, text()]
"""Non-empty text."""
