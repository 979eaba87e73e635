"""The Stream Key Manager's operations: signed requests in, CIP-7 checks, envelopes and sealed keys out.

Every request is a `Command` signed by its caller with method stream_encrypt, stream_decrypt or
fetch_epoch_keys, the stream id in its envelope, and a nonce from the caller's microsecond clock.
`KeyManager.authenticate` checks, in order: the method, the signature, the nonce within
`FRESHNESS_US` of this service's clock and above the caller's last nonce, spent or in flight
(NONCE_REPLAYED otherwise). Last nonces live in memory: after a restart a request may be replayed
within the freshness window, which repeats an idempotent read or encrypts the same plaintext
again under a fresh actor_nonce, and never reveals anything the caller was not entitled to.

A nonce is held while its operation runs and spent when the operation answers or refuses for a
reason of the request's own (ENTITLEMENT_REQUIRED, ...). An operation that fails for a reason of
the service's (NOT_READY, TIMEOUT, an unexpected failure: `is_transient`) releases it, so the
same signed request succeeds when it is sent again once the service is ready: nothing was
answered, so nothing is repeated.

Then each operation catches the events fold up to the broker's current end (`EventFollower.catch_up`)
and decides against that state:

- encrypt: the stream is PLATFORM_MANAGED (NOT_PLATFORM_MANAGED_STREAM), the caller is its owner or
  its active publisher key (UNAUTHORIZED), the AAD names this stream and epoch (INVALID_ARGUMENT),
  the plaintext fits (PAYLOAD_TOO_LARGE); then a fresh actor_nonce (`Vault`), the envelope, and
  the receipt (`ciphertext_receipt`).
- decrypt: `check_decrypt_access` for (stream, beneficiary, caller, epoch), then DECRYPTION_FAILED
  for anything that does not open.
- epoch keys: at most `MAX_EPOCHS` epochs, each passing `check_decrypt_access`; the content keys
  sealed to the account's ACTIVE X25519 key (`sealing_key`: KEY_REVOKED, INVALID_ACCOUNT_KEY).

Decrypt and key fetches are audited (`Audit`): who, which stream, which epochs; never key material
or plaintext. Master seeds and content keys exist only in this process's memory.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

from watchtower.keymgr.follower import Readiness
from watchtower.keymgr.kek import Kek
from watchtower.metrics import keymgr as keymgr_metrics
from watchtower.protocol.commands import EpochKeys, StreamDecrypt, StreamEncrypt, read_body
from watchtower.protocol.confidential.envelope import (
    derive_content_key,
    derive_nonce,
    open_payload,
    parse_envelope_aad,
    seal_payload,
    wrap_epoch_key,
)
from watchtower.protocol.confidential.receipt import envelope_hash, sign_receipt
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NonceReplayedError,
    NotPlatformManagedStreamError,
    NotReadyError,
    RangeTooLargeError,
    RequestTimeoutError,
    StreamNotFoundError,
    UnauthorizedError,
    WatchtowerError,
)
from watchtower.protocol.ledger.keymgr_access import KeymgrState, check_decrypt_access, sealing_key
from watchtower.protocol.signed_command import Command, Method, verify_command
from watchtower.protocol.stream.reads import require_config, require_schedule
from watchtower.protocol.stream.state import StreamState

FRESHNESS_US: Final = 5 * 60 * 1_000_000
MAX_EPOCHS: Final = 1_024
#: Content keys kept in memory (32 bytes each); the seed stays the only long-lived secret.
CONTENT_KEY_CACHE: Final = 4_096


class EventView(Protocol):
    """The events fold the operations decide on (`follower.EventFollower`)."""

    keymgr: KeymgrState
    streams: dict[str, StreamState]
    quarantined: int

    def catch_up(self, timeout_s: float = ...) -> None:
        """Return once everything committed before the call is folded; NOT_READY otherwise."""

    def reading(self) -> AbstractContextManager[object]:
        """Hold the fold still (and the nonce table) while the caller reads."""

    def readiness(self) -> Readiness:
        """Whether a request would be served now, and why not."""


class SeedStore(Protocol):
    """Where master seeds and actor nonces come from (`vault.Vault`)."""

    @property
    def sealed_streams(self) -> dict[str, str]:
        """Streams whose stored seed no KEK of this process opens, with the KEK id each names."""

    def next_actor_nonce(self) -> int:
        """A fresh actor_nonce, never issued before."""

    def seed_for(self, stream_id: str) -> bytes:
        """The stream's master seed, created on first need."""


class Audit(Protocol):
    """Where decrypts and key fetches are recorded (`audit.KafkaAudit`; never key material)."""

    def record(self, action: str, *, stream_id: str, caller: str, account: str, key_epochs: list[int],
               account_key_id: int | None = None) -> None: ...


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` refuses a request for the service's reason, not the request's: the same signed
    request may be sent again (NOT_READY, TIMEOUT, or a failure that is no spec refusal)."""
    return isinstance(exc, (NotReadyError, RequestTimeoutError)) or not isinstance(exc, WatchtowerError)


_Operation = Callable[["KeyManager", Command], dict[str, Any]]


def _settles_nonce(op: _Operation) -> _Operation:
    """Spend the request's nonce when `op` answers or refuses it; release it when `op` fails
    transiently (`is_transient`)."""

    @functools.wraps(op)
    def run(self: KeyManager, cmd: Command) -> dict[str, Any]:
        try:
            result = op(self, cmd)
        except BaseException as exc:
            self._settle_nonce(cmd, spent=not is_transient(exc))
            raise
        self._settle_nonce(cmd, spent=True)
        return result

    return run


class KeyManager:
    """The operations behind the HTTP routes (thread-safe; blocking).

    A route calls `authenticate`, then the operation with the command it returned; the nonce
    `authenticate` holds is settled by that operation.
    """

    def __init__(
        self,
        vault: SeedStore,
        follower: EventView,
        kek: Kek,
        audit: Audit,
        *,
        clock_us: Callable[[], int] = lambda: time.time_ns() // 1_000,
    ) -> None:
        self.vault = vault
        self.follower = follower
        self._signer = kek.receipt_signing_key()
        self.public_key = bytes(self._signer.verify_key)
        self.audit = audit
        self._clock_us = clock_us
        self._last_nonce: dict[str, int] = {}  # per caller: the highest spent nonce
        self._in_flight: dict[str, set[int]] = {}  # per caller: nonces held by running operations
        self._content_keys: dict[tuple[str, int], bytes] = {}
        self._keys_lock = threading.Lock()

    # ------------------------------------------------------------------ authentication
    def authenticate(self, payload: object, method: Method) -> Command:
        """The request's signed command, checked (module docstring), else its spec error."""
        if not isinstance(payload, Mapping) or set(payload) != {"command"}:
            raise InvalidArgumentError('the request body is {"command": <a signed command>} and nothing else')
        cmd = Command.from_dict(payload["command"])
        if cmd.method != method:
            raise InvalidArgumentError(f"this route takes a command signed for {method}, got {cmd.method}")
        verify_command(cmd)
        now = self._clock_us()
        if abs(cmd.nonce - now) > FRESHNESS_US:
            raise NonceReplayedError(
                "the request's nonce is more than 5 minutes from the key manager's clock; sign it again with "
                "the current time in microseconds as the nonce (and check the clock)",
                details={"nonce": cmd.nonce, "server_time_us": now},
            )
        with self.follower.reading():  # the fold's lock doubles as the nonce table's
            held = self._in_flight.setdefault(cmd.caller, set())
            last = max(self._last_nonce.get(cmd.caller, 0), max(held, default=0))
            if cmd.nonce <= last:
                if not held:
                    del self._in_flight[cmd.caller]
                raise NonceReplayedError(
                    f"nonce {cmd.nonce} is not above {last}, the last this caller used here; sign again with "
                    "a fresh nonce",
                    details={"last_nonce": last},
                )
            held.add(cmd.nonce)
        return cmd

    def _settle_nonce(self, cmd: Command, *, spent: bool) -> None:
        """End the hold `authenticate` put on the command's nonce; a spent nonce is never accepted again."""
        with self.follower.reading():
            held = self._in_flight.get(cmd.caller)
            if held is not None:
                held.discard(cmd.nonce)
                if not held:
                    del self._in_flight[cmd.caller]
            if spent and cmd.nonce > self._last_nonce.get(cmd.caller, 0):
                self._last_nonce[cmd.caller] = cmd.nonce

    def health(self) -> dict[str, Any]:
        """The ``/v1/health`` answer: ``ready`` as the projections', and ``reason`` while not ready."""
        readiness = self.follower.readiness()
        body: dict[str, Any] = {"ok": True, "ready": readiness.ready}
        if readiness.reason is not None:
            body["reason"] = readiness.reason
        return {**body, "quarantined": self.follower.quarantined, "sealed_seeds": len(self.vault.sealed_streams)}

    # ------------------------------------------------------------------ encrypt
    @keymgr_metrics.timed("encrypt")
    @_settles_nonce
    def encrypt(self, cmd: Command) -> dict[str, Any]:
        body = read_body(cmd, StreamEncrypt)
        key_epoch, aad, plaintext = body.key_epoch, body.aad, body.plaintext
        _require_aad_for(aad, cmd.stream_id, key_epoch)
        # A view that already lets the caller encrypt needs no catch-up: the owner and the access
        # mode never change, and a receipt for a key rotated away since is useless (a publish must
        # still be signed by the key in force). Anything else is decided on a caught-up view.
        try:
            self._check_encrypter(cmd)
        except WatchtowerError:
            self.follower.catch_up()
            self._check_encrypter(cmd)
        actor_nonce = self.vault.next_actor_nonce()
        content_key = self._content_key(cmd.stream_id, key_epoch)
        envelope = seal_payload(
            content_key=content_key,
            nonce=derive_nonce(content_key, cmd.stream_id, key_epoch, actor_nonce),
            aad=aad,
            plaintext=plaintext,
        )
        receipt = sign_receipt(
            self._signer, stream_id=cmd.stream_id, key_epoch=key_epoch, payload_hash=envelope_hash(envelope)
        )
        return {
            "envelope_hex": envelope.hex(),
            "keymgr_receipt_hex": receipt.hex(),
            "key_epoch": key_epoch,
            "actor_nonce": actor_nonce,
        }

    def _check_encrypter(self, cmd: Command) -> None:
        with self.follower.reading():
            state = self.follower.streams.get(cmd.stream_id)
            if state is None or not state.created:
                raise StreamNotFoundError(f"stream {cmd.stream_id!r} does not exist; create_stream it first")
            if not require_config(state).is_paid:
                raise NotPlatformManagedStreamError(
                    f"stream {cmd.stream_id!r} is OPEN; only a PLATFORM_MANAGED stream is encrypted by the key manager"
                )
            publisher = require_schedule(state).current.public_key
            if cmd.caller != state.owner and cmd.caller_public_key != publisher:
                raise UnauthorizedError(
                    f"only the owner of {cmd.stream_id!r} or its active publisher key may encrypt for it; sign "
                    "the request with one of them"
                )

    def _content_key(self, stream_id: str, key_epoch: int) -> bytes:
        """The epoch's content key, derived once per (stream, epoch) while it stays in the cache."""
        cache_key = (stream_id, key_epoch)
        with self._keys_lock:
            key = self._content_keys.get(cache_key)
        if key is None:
            key = derive_content_key(self.vault.seed_for(stream_id), stream_id, key_epoch)
            with self._keys_lock:
                if len(self._content_keys) >= CONTENT_KEY_CACHE:
                    self._content_keys.pop(next(iter(self._content_keys)))  # the oldest entry
                self._content_keys[cache_key] = key
        return key

    # ------------------------------------------------------------------ decrypt
    @keymgr_metrics.timed("decrypt")
    @_settles_nonce
    def decrypt(self, cmd: Command) -> dict[str, Any]:
        body = read_body(cmd, StreamDecrypt)
        account, key_epoch, aad, envelope = body.beneficiary_account, body.key_epoch, body.aad, body.envelope
        self.follower.catch_up()
        with self.follower.reading():
            check_decrypt_access(
                self.follower.keymgr,
                stream_id=cmd.stream_id,
                beneficiary_account=account,
                actor=cmd.caller,
                key_epoch=key_epoch,
            )
        self.audit.record(
            "stream_decrypt", stream_id=cmd.stream_id, caller=cmd.caller, account=account, key_epochs=[key_epoch]
        )
        plaintext = open_payload(content_key=self._content_key(cmd.stream_id, key_epoch), aad=aad, envelope=envelope)
        return {"plaintext_hex": plaintext.hex()}

    # ------------------------------------------------------------------ epoch keys
    @keymgr_metrics.timed("epoch_keys")
    @_settles_nonce
    def epoch_keys(self, cmd: Command) -> dict[str, Any]:
        body = read_body(cmd, EpochKeys)
        account, first, last = body.account, body.from_key_epoch, body.to_key_epoch
        if last < first:
            raise InvalidArgumentError("to_key_epoch must be at least from_key_epoch")
        if last - first + 1 > MAX_EPOCHS:
            raise RangeTooLargeError(
                f"at most {MAX_EPOCHS} epochs per call; ask for {first}..{first + MAX_EPOCHS - 1} first",
                details={"max_epochs": MAX_EPOCHS},
            )
        key_id = body.account_key_id
        self.follower.catch_up()
        with self.follower.reading():
            view = self.follower.keymgr
            for epoch in range(first, last + 1):
                check_decrypt_access(
                    view, stream_id=cmd.stream_id, beneficiary_account=account, actor=cmd.caller, key_epoch=epoch
                )
            key = sealing_key(view, account, key_id)
        seed = self.vault.seed_for(cmd.stream_id)
        self.audit.record(
            "fetch_epoch_keys",
            stream_id=cmd.stream_id,
            caller=cmd.caller,
            account=account,
            key_epochs=[first, last],
            account_key_id=key.account_key_id,
        )
        sealed = [
            {
                "key_epoch": epoch,
                "sealed_key_hex": wrap_epoch_key(derive_content_key(seed, cmd.stream_id, epoch), key.public_key).hex(),
            }
            for epoch in range(first, last + 1)
        ]
        return {"account_key_id": key.account_key_id, "keys": sealed}


def _require_aad_for(aad: bytes, stream_id: str, key_epoch: int) -> None:
    """The AAD must be `envelope_aad` of this stream and epoch, or the receipt would vouch for a
    ciphertext bound to another stream."""
    fields = parse_envelope_aad(aad)
    if fields["stream_id"] != stream_id or fields["key_epoch"] != key_epoch:
        raise InvalidArgumentError(
            f"aad is bound to stream {fields['stream_id']!r} epoch {fields['key_epoch']}, not to this request's "
            f"stream {stream_id!r} epoch {key_epoch}; build it with envelope_aad for this stream and epoch"
        )
