"""`KeyManagerApi`: the Stream Key Manager's HTTP API, every request a command signed by its caller.

The key manager holds each PLATFORM_MANAGED feed's master seed; no caller ever sees it. It answers:

- ``encrypt`` (the feed's owner or publisher, or the ingestion publisher key it delegated to): the
  envelope of a payload plus the key manager's signed receipt, which the publish command must carry;
- ``decrypt`` (an entitled account or its authorized actor): one payload, opened by the service;
- ``epoch_keys`` (an entitled account or its actor): epoch keys sealed to the account's ACTIVE
  X25519 key, opened by the holder of its private key.

Every POST body is ``{"command": <signed Command>}`` with method stream_encrypt / stream_decrypt /
fetch_epoch_keys, envelope stream_id = the feed's stream id and the caller's microsecond nonce:
the signature proves the caller, the nonce makes a captured request useless to replay. Errors
arrive as ``{"error": {"code", "message"}}`` and are raised as the spec's `WatchtowerError`.

The SDK's `watchtower.client.keymgr.KeyManagerClient` is this API with the key manager's URL
looked up the SDK's way; ingestion calls it with the URL it is configured with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Protocol

from watchtower.http.api_client import ApiTransport, ApiUnavailableError
from watchtower.protocol.errors import MalformedRecordError, RequestTimeoutError, WatchtowerError
from watchtower.protocol.json_ints import as_int
from watchtower.protocol.signed_command import Command

ENV_KEYMGR: Final = "WATCHTOWER_KEYMGR"
MAX_EPOCHS_PER_FETCH: Final = 1024


class Signer(Protocol):
    """Who calls the key manager: signs a command with its key and its next nonce (`client.account.Account`)."""

    def sign(self, method: str, stream_id: str, body: Mapping[str, Any], nonce: int | None = None) -> Command: ...


class _Transport(ApiTransport):
    """The API client's transport and error decoding, with errors that name the key manager."""

    def _transport_error(self, reason: object, url: str, wait: float) -> WatchtowerError:
        if isinstance(reason, TimeoutError):
            return RequestTimeoutError(f"the key manager at {url} did not answer within {wait:g}s; retry, "
                                       f"and check it with `watchtower status`")
        return ApiUnavailableError(
            f"no key manager at {self.base_url} ({reason}); start the stack with `watchtower up`, or point "
            f"--keymgr / ${ENV_KEYMGR} at a running one"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Encrypted:
    """What `stream_encrypt` returned: the envelope (nonce ‖ ciphertext ‖ tag) and its receipt."""

    envelope: bytes
    keymgr_receipt: bytes
    key_epoch: int
    actor_nonce: int


@dataclasses.dataclass(frozen=True, slots=True)
class SealedEpochKeys:
    """Epoch keys sealed to `account_key_id`: key_epoch -> sealed box (open with `account_keys`)."""

    account_key_id: int
    sealed: dict[int, bytes]


class KeyManagerApi:
    """Synchronous client of the key manager at `url`; holds no connection, so it is safe to share."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self._http = _Transport(url.rstrip("/"), timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @property
    def url(self) -> str:
        return self._http.base_url

    def signed_request(self, caller: Signer, method: str, path: str, stream_id: str,
                       body: Mapping[str, Any]) -> dict[str, Any]:
        """POST `path` with ``{"command": caller.sign(method, stream_id, body)}``; the decoded answer."""
        cmd = caller.sign(method, stream_id, body)
        return self._http.request("POST", path, body={"command": cmd.to_dict()})

    def encrypt(self, caller: Signer, stream_id: str, *, key_epoch: int, aad: bytes, plaintext: bytes) -> Encrypted:
        """`stream_encrypt`: the envelope of `plaintext` for `key_epoch` bound to `aad`, and its receipt."""
        reply = self.signed_request(caller, "stream_encrypt", "/v1/keymgr/encrypt", stream_id,
                                    {"key_epoch": key_epoch, "aad": aad, "plaintext": plaintext})
        return Encrypted(_hex(reply, "envelope_hex"), _hex(reply, "keymgr_receipt_hex"),
                         _int(reply, "key_epoch"), _int(reply, "actor_nonce"))

    def decrypt(self, caller: Signer, stream_id: str, *, beneficiary_account: str, key_epoch: int, aad: bytes,
                envelope: bytes) -> bytes:
        """`stream_decrypt`: the plaintext of `envelope`, opened by the service for an entitled account."""
        reply = self.signed_request(caller, "stream_decrypt", "/v1/keymgr/decrypt", stream_id,
                                    {"beneficiary_account": beneficiary_account, "key_epoch": key_epoch,
                                     "aad": aad, "envelope": envelope})
        return _hex(reply, "plaintext_hex")

    def epoch_keys(self, caller: Signer, stream_id: str, *, account: str, from_key_epoch: int, to_key_epoch: int,
                   account_key_id: int | None = None) -> SealedEpochKeys:
        """The epoch keys from..to of `stream_id`, each sealed to `account`'s ACTIVE X25519 key.

        At most 1,024 epochs per call (LIMIT_EXCEEDED from the service otherwise); ENTITLEMENT_REQUIRED
        unless every epoch is covered by `account`'s entitlement.
        """
        body: dict[str, Any] = {"account": account, "from_key_epoch": from_key_epoch, "to_key_epoch": to_key_epoch}
        if account_key_id is not None:
            body["account_key_id"] = account_key_id
        reply = self.signed_request(caller, "fetch_epoch_keys", "/v1/keymgr/epoch-keys", stream_id, body)
        keys = reply.get("keys")
        if not isinstance(keys, list):
            raise MalformedRecordError("the key manager's epoch-keys answer has no 'keys' list")
        sealed = {_int(k, "key_epoch"): _hex(k, "sealed_key_hex") for k in keys if isinstance(k, dict)}
        return SealedEpochKeys(_int(reply, "account_key_id"), sealed)

    def public_key(self) -> bytes:
        """The ed25519 key that signs ciphertext receipts (GET /v1/keymgr/public-key)."""
        return _hex(self._http.request("GET", "/v1/keymgr/public-key"), "public_key_hex")

    def health(self) -> dict[str, Any]:
        """GET /healthz."""
        return self._http.request("GET", "/healthz")


def _int(data: Mapping[str, Any], name: str) -> int:
    value = as_int(data.get(name))  # a number, or its decimal string past 2**53 - 1
    if type(value) is not int:
        raise MalformedRecordError(f"the key manager's answer has no integer {name!r}; is --keymgr a key manager?")
    return value


def _hex(data: Mapping[str, Any], name: str) -> bytes:
    value = data.get(name)
    if not isinstance(value, str):
        raise MalformedRecordError(f"the key manager's answer has no hex {name!r}; is --keymgr a key manager?")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise MalformedRecordError(f"the key manager's {name!r} is not hex") from None
