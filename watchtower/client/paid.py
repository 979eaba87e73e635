"""Paid (PLATFORM_MANAGED) feeds in the SDK: encrypted publishing and local decryption.

- `PaidPublisher` is a `Publisher` whose every payload goes through the key manager's
  ``stream_encrypt`` (CIP-7: actors must not encrypt on their own): the AAD binds stream, sequence,
  key epoch, kind and content type; the message carries the envelope as CIPHERTEXT and the publish
  command carries the key manager's receipt, without which the stream refuses it.
- `EpochKeyRing` is where a decrypting `Subscriber` gets epoch keys: fetched from the key manager
  sealed to the account's X25519 key, kept sealed on disk (`account_keys.store_sealed_keys`) and
  opened in memory, so each epoch costs one request and then every message decrypts locally (the
  fast path). A key from the store is opened only while the account key it is sealed to is still
  ACTIVE in the API's account view (CIP-7: a revoked key is never used to decrypt); KEY_REVOKED
  otherwise. The payer of a sponsored purchase is not entitled: the key manager answers it
  ENTITLEMENT_REQUIRED, and so does it for any epoch past the entitlement.

The current key epoch is computed, like the workers do, from the clock: floor(block height /
key_epoch_blocks), block height = (now − genesis) / block interval (`protocol.ledger.billing`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.account_keys import load_sealed_keys, open_sealed_key, store_sealed_keys
from watchtower.client.keymgr import MAX_EPOCHS_PER_FETCH, KeyManagerClient, SealedEpochKeys
from watchtower.client.sdk import Publisher
from watchtower.client.stream_api import StreamApi
from watchtower.protocol.confidential.envelope import envelope_aad
from watchtower.protocol.enums import AccessMode, PayloadFormat, parse_access_mode
from watchtower.protocol.errors import (
    EntitlementRequiredError,
    InvalidArgumentError,
    KeyRevokedError,
    MalformedRecordError,
    NotPlatformManagedStreamError,
)
from watchtower.protocol.ledger.billing import key_epoch_at
from watchtower.protocol.ledger.paid import PaidStreamConfig
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.message import TagValue


def paid_config(info: Mapping[str, Any]) -> PaidStreamConfig:
    """The PaidStreamConfig in a stream_info answer; NOT_PLATFORM_MANAGED_STREAM for an open stream."""
    nested = info.get("config")
    config: Mapping[str, Any] = nested if isinstance(nested, Mapping) else info
    mode = config.get("access_mode", "OPEN")
    paid = config.get("paid_stream_config")
    if parse_access_mode(mode) is not AccessMode.PLATFORM_MANAGED or not isinstance(paid, Mapping):
        raise NotPlatformManagedStreamError(
            f"stream {info.get('stream_id', '?')} is OPEN: its messages are plaintext, so there is nothing to "
            f"encrypt, buy or decrypt; create a paid feed with `watchtower new feed --paid`"
        )
    try:
        return PaidStreamConfig.from_dict(paid)
    except InvalidArgumentError as err:
        raise MalformedRecordError(f"the stream's paid_stream_config is not valid: {err.message}") from None


def current_key_epoch(config: PaidStreamConfig, now_unix_ms: int | None = None) -> int:
    """The key epoch in force now (or at `now_unix_ms`) for a stream with `config`."""
    now = time.time_ns() // 1_000_000 if now_unix_ms is None else now_unix_ms
    return key_epoch_at(now, config.key_epoch_blocks)


class PaidPublisher(Publisher):
    """Publishes CIPHERTEXT to a PLATFORM_MANAGED stream, encrypting through `keymgr`.

    Same contract as `Publisher` (head + 1, STALE_SEQUENCE, TIMEOUT); `publish` takes the
    plaintext. Each message is sealed for the current key epoch (`key_epoch` pins one instead).
    """

    def __init__(self, api: StreamApi, owner: Account, stream_id: str, publisher_key: nacl.signing.SigningKey,
                 keymgr: KeyManagerClient, *, config: PaidStreamConfig | None = None, key_epoch: int | None = None,
                 timeout_s: float = 30.0) -> None:
        super().__init__(api, owner, stream_id, publisher_key, timeout_s=timeout_s)
        self.keymgr = keymgr
        self._config = config
        self.key_epoch = key_epoch

    @property
    def config(self) -> PaidStreamConfig:
        """The stream's paid terms (read once from the API)."""
        if self._config is None:
            reader = getattr(self.api, "stream_info", None)  # ApiClient has it; a bare StreamApi may not
            if reader is None:
                raise InvalidArgumentError("this API client cannot read stream configs; pass config= explicitly")
            self._config = paid_config({"stream_id": self.stream_id, **reader(self.stream_id)})
        return self._config

    def publish_command(self, sequence: int, signing_key_id: int, kind: str, payload: bytes,
                        tags: Mapping[str, TagValue] | None, content_type: str) -> Command:
        """Encrypt `payload` through stream_encrypt, sign the CIPHERTEXT message, attach the receipt."""
        epoch = self.key_epoch if self.key_epoch is not None else current_key_epoch(self.config)
        aad = envelope_aad(stream_id=self.stream_id, sequence=sequence, key_epoch=epoch, kind=kind,
                           content_type=content_type)
        sealed = self.keymgr.encrypt(self.owner, self.stream_id, key_epoch=epoch, aad=aad, plaintext=payload)
        msg = sign_message(
            stream_id=self.stream_id,
            sequence=sequence,
            timestamp_unix_ms=time.time_ns() // 1_000_000,
            kind=kind,
            payload=sealed.envelope,
            signing_key=self.publisher_key,
            content_type=content_type,
            tags=tags,
            payload_format=PayloadFormat.CIPHERTEXT,
            key_epoch=sealed.key_epoch,
            signing_key_id=signing_key_id,
        )
        body = {**msg.to_json_dict(), "keymgr_receipt": sealed.keymgr_receipt}
        return self.owner.sign("publish", self.stream_id, body)


class AccountView(Protocol):
    """Where a ring reads the status of the account key a stored epoch key is sealed to
    (``GET /v1/accounts/{address}``: `ApiClient`, `FakeApi`)."""

    def account_info(self, address: str) -> dict[str, Any]: ...


class EpochKeyRing:
    """Epoch content keys of `holder`'s entitlements, fetched sealed and opened locally.

    `holder` owns the X25519 private keys the boxes are sealed to (its entitlement is used);
    `caller` signs the fetch (default `holder`; an authorized actor of `holder` may fetch for it).
    Opened keys live only in this object's memory; on disk they stay sealed. Never print them.

    `settle_s`: the key manager learns of a purchase from the log a moment after it is
    acknowledged; right after buying, retry ENTITLEMENT_REQUIRED for up to this long.

    `accounts`: the API's account view. A key kept sealed on disk is opened only after the view
    shows the account key it is sealed to ACTIVE (KEY_REVOKED otherwise); without a view the store
    cannot be checked, so its keys are fetched again (the key manager seals only to ACTIVE keys).
    """

    def __init__(self, keymgr: KeyManagerClient, holder: Account, *, caller: Account | None = None,
                 account_key_id: int | None = None, settle_s: float = 0.0, accounts: AccountView | None = None) -> None:
        self.keymgr = keymgr
        self.holder = holder
        self.caller = caller or holder
        self.account_key_id = account_key_id
        self.settle_s = settle_s
        self.accounts = accounts
        self._open: dict[tuple[str, int], bytes] = {}

    def __repr__(self) -> str:  # never the keys
        return f"EpochKeyRing(holder={self.holder.address!r}, cached={len(self._open)})"

    def fetch(self, stream_id: str, from_key_epoch: int, to_key_epoch: int) -> list[int]:
        """Fetch epochs from..to sealed, store them sealed, open them; returns the epochs fetched.

        Ranges longer than 1,024 epochs are fetched in several calls. ENTITLEMENT_REQUIRED when
        any epoch is not covered by `holder`'s entitlement; ACTOR_NOT_AUTHORIZED_FOR_ACCOUNT for an
        actor without a grant.
        """
        if type(from_key_epoch) is not int or type(to_key_epoch) is not int or not 0 <= from_key_epoch <= to_key_epoch:
            raise InvalidArgumentError(f"fetch needs 0 ≤ from ≤ to, got {from_key_epoch!r}..{to_key_epoch!r}")
        fetched: list[int] = []
        start = from_key_epoch
        while start <= to_key_epoch:
            end = min(to_key_epoch, start + MAX_EPOCHS_PER_FETCH - 1)
            got = self._sealed(stream_id, start, end)
            store_sealed_keys(self.holder, stream_id, {e: (got.account_key_id, box) for e, box in got.sealed.items()})
            for epoch, box in got.sealed.items():
                self._open[(stream_id, epoch)] = open_sealed_key(self.holder, got.account_key_id, box)
                fetched.append(epoch)
            start = end + 1
        return sorted(fetched)

    def _sealed(self, stream_id: str, start: int, end: int) -> SealedEpochKeys:
        deadline = time.monotonic() + self.settle_s
        while True:
            try:
                return self.keymgr.epoch_keys(self.caller, stream_id, account=self.holder.address,
                                              from_key_epoch=start, to_key_epoch=end,
                                              account_key_id=self.account_key_id)
            except EntitlementRequiredError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def content_key(self, stream_id: str, key_epoch: int) -> bytes:
        """The content key of (`stream_id`, `key_epoch`): from memory, else the sealed store (KEY_REVOKED
        when it is sealed to an account key no longer ACTIVE), else fetched."""
        key = self._open.get((stream_id, key_epoch))
        if key is not None:
            return key
        stored = load_sealed_keys(self.holder, stream_id).get(key_epoch) if self.accounts is not None else None
        if stored is not None:
            self._require_active(stream_id, key_epoch, stored[0])
            key = open_sealed_key(self.holder, *stored)
            self._open[(stream_id, key_epoch)] = key
            return key
        self.fetch(stream_id, key_epoch, key_epoch)
        return self._open[(stream_id, key_epoch)]

    def _require_active(self, stream_id: str, key_epoch: int, account_key_id: int) -> None:
        assert self.accounts is not None
        keys = self.accounts.account_info(self.holder.address).get("keys", [])
        status = next((k.get("status") for k in keys if k.get("account_key_id") == account_key_id), None)
        if status == "ACTIVE":
            return
        raise KeyRevokedError(
            f"the epoch key {key_epoch} of {stream_id} kept on this machine is sealed to account key {account_key_id} "
            f"of {self.holder.address}, which is {'revoked' if status else 'not a registered key'}; a revoked key is "
            "never used to decrypt. Register a new key (`watchtower account keys add`) and fetch the epoch keys "
            f"again, sealed to it (`watchtower feed {stream_id} rewrap-epochs`, or `fetch-keys`)",
            details={"account_key_id": account_key_id, "key_epoch": key_epoch, "status": status})

    def cached_epochs(self, stream_id: str) -> list[int]:
        """The epochs of `stream_id` whose keys this machine holds (sealed or open)."""
        stored = set(load_sealed_keys(self.holder, stream_id))
        return sorted(stored | {e for (s, e) in self._open if s == stream_id})
