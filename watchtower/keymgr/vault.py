"""The key manager's durable secrets on the compacted ``keymgr.state`` topic.

Records (partition 0, latest per key kept by compaction; defined in `schemas.keymgr_records`):

- ``seed/<stream_id>`` → ``{"v": 1, "kek_id", "wrapped_hex"}``: the stream's 32-byte master seed,
  wrapped under the KEK (`kek.Kek.wrap`, AAD = purpose "master_seed", the stream id, the KEK id).
  The seed itself never reaches Kafka, a log or an exception.
- ``actor-nonces`` → ``{"v": 1, "reserved_through": n}``: every actor_nonce ≤ n may have been
  handed out. Before handing out any nonce above it, the vault commits a new reservation of
  `block` more; a restarted instance starts above the last committed reservation, so no
  actor_nonce is ever issued twice for any content key, across kill -9 too. (One counter for the
  whole service: unique per content key follows, and a crash wastes at most one block.)

A ``seed/`` record that does not open under this instance's KEK (wrapped under another KEK, altered,
or forged: on a broker without ACLs anyone can write the topic) never stops the key manager from
starting: the candidates of a stream are tried newest first and the first that opens is the seed; a
stream none of whose records opens is *sealed*. It is logged with its topic, partition and offset
and the KEK id it names, counted in health, and every request for it is refused with NOT_READY
naming that KEK, and the vault never makes a new seed for it (that would orphan its ciphertext).

Every write is a transaction of a producer with one fixed ``transactional.id`` per deployment:
``init_transactions`` at start fences any older instance (its next write fails and it stops
serving encryption), and the state is read *after* it, so the new instance sees everything the
old one committed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Final, Protocol

from watchtower.keymgr.kek import Kek, KekError
from watchtower.protocol.constants import MAX_ACTOR_NONCE
from watchtower.protocol.errors import NotReadyError, WatchtowerError
from watchtower.schemas.keymgr_records import (
    KEYMGR_RECORD_VERSION,
    NonceReservationRecord,
    WrappedSeedRecord,
    decode_nonce_reservation,
    decode_wrapped_seed,
    encode_keymgr_record,
)
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.reader import read_committed
from watchtower.workers.host import FencedError
from watchtower.workers.tx_writer import TransactionalWriter, WriteFailedError

log = logging.getLogger("watchtower.keymgr.vault")

STATE_PARTITION: Final = 0
SEED_PURPOSE: Final = "master_seed"
SEED_BYTES: Final = 32
NONCE_KEY: Final = "actor-nonces"
DEFAULT_NONCE_BLOCK: Final = 1_000
# How far above the clock floor an honest reservation can be: nonces start at 1 (or at the clock
# after a quarantine) and grow by one an encryption, so passing the clock by 2**40 (a million million
# encryptions ahead of one a microsecond) is a record no key manager committed. Such a record would
# otherwise exhaust the nonces (MAX_ACTOR_NONCE) and stop encryption for good.
PLAUSIBLE_ABOVE_CLOCK: Final = 2**40
_TXN_TIMEOUT_S: Final = 30.0
Record = WrappedSeedRecord | NonceReservationRecord


class _RecordProducer(Protocol):
    """What a vault write needs of the transactional writer's producer: one record at a time."""

    def produce(self, topic: str, value: bytes, key: bytes, partition: int) -> None: ...


def clock_floor() -> int:
    """Microseconds since the epoch: above every actor nonce a deployment counted to (it would take
    an encryption per microsecond since 1970 to pass it), so a safe restart point when the last
    reservation cannot be read."""
    return time.time_ns() // 1_000


def transactional_id(prefix: str | None) -> str:
    """The one writer id of a deployment's key manager (``wt-`` like every Watchtower id)."""
    return f"wt-keymgr-{topic_name('keymgr-state', prefix)}"


def seed_key(stream_id: str) -> str:
    return f"seed/{stream_id}"


class VaultFencedError(NotReadyError):
    """Another key-manager instance took over the writer id; this one must stop encrypting."""


class NoncesExhaustedError(NotReadyError):
    """The next reservation would pass MAX_ACTOR_NONCE: encrypting stops, everything else serves."""


class SeedSealedError(NotReadyError):
    """The stream's master seed is stored, but not under this instance's KEK (see the module docstring)."""


class Vault:
    """Wrapped master seeds and actor-nonce reservations; thread-safe."""

    def __init__(self, bootstrap: str, prefix: str | None, kek: Kek, *, nonce_block: int = DEFAULT_NONCE_BLOCK) -> None:
        self.topic = topic_name("keymgr-state", prefix)
        self._bootstrap = bootstrap
        self._kek = kek
        self._block = nonce_block
        self._lock = threading.Lock()
        self._seeds: dict[str, bytes] = {}
        self._sealed: dict[str, str] = {}  # stream id -> the KEK id its newest seed record names
        self._next_nonce = 1
        self._reserved_through = 0
        self._fenced = False
        self._stop = threading.Event()
        # The vault's commit outcome may be unknown after a broker outage; the writer then settles it
        # with a new producer and the state is read again (`workers.tx_writer`), instead of refusing
        # every later write. A fence is final: a newer instance took over.
        self._writer = TransactionalWriter(
            kafka_config(bootstrap, **{"transactional.id": transactional_id(prefix), "enable.idempotence": True,
                                       "acks": "all", "transaction.timeout.ms": 60_000, "log_level": 3}),
            name="keymgr-vault", stop=self._stop, on_restart=self._reload_locked, call_timeout_s=_TXN_TIMEOUT_S,
            fence_is_final=True)

    # ------------------------------------------------------------------ start
    def open(self) -> None:
        """Fence older instances, load what they committed, and reserve the first nonce block.
        ``init_transactions`` is retried until the brokers answer (or `close`)."""
        if not self._writer.open():
            raise NotReadyError("the key manager was stopped before its state could be loaded")
        with self._lock:
            self._reload_locked()
            try:
                self._reserve_locked()
            except NoncesExhaustedError as exc:  # decrypts and key fetches still serve
                log.error("%s", exc.message)
        log.info("key-manager state loaded: %d stream seeds, actor nonces from %d", len(self._seeds), self._next_nonce)

    def _reload_locked(self) -> None:
        """Read the seeds and the nonce reservation from the log: at the start, and after a write
        whose outcome was unknown (its producer was replaced). Nonces continue above the reservation."""
        reserved = 0
        unreadable_reservation = False
        wrapped: dict[str, list[tuple[str, bytes, str]]] = {}  # stream id -> (kek id, blob, where), oldest first
        for record in read_committed(self._bootstrap, [self.topic], partition=STATE_PARTITION):
            key = (record.key() or b"").decode("utf-8", "replace")
            where = f"{record.topic()}[{record.partition()}]@{record.offset()}"
            try:
                if key == NONCE_KEY:
                    value = decode_nonce_reservation(record.value()).reserved_through
                    if value > clock_floor() + PLAUSIBLE_ABOVE_CLOCK:
                        raise ValueError(f"a reservation of {value} is past any nonce a key manager handed out")
                    reserved = max(reserved, value)
                elif key.startswith("seed/"):
                    seed_record = decode_wrapped_seed(record.value())
                    wrapped.setdefault(key[len("seed/") :], []).append(
                        (seed_record.kek_id, bytes.fromhex(seed_record.wrapped_hex), where))
            except (WatchtowerError, ValueError) as exc:
                log.warning("quarantined %s (%s): not a key-manager state record: %s", where, key, type(exc).__name__)
                unreadable_reservation = unreadable_reservation or key == NONCE_KEY
        if unreadable_reservation:
            # Compaction may have dropped every good reservation behind the bad one, so the highest
            # readable one is no proof that no nonce above it was handed out: start above the clock.
            reserved = max(reserved, clock_floor())
            log.warning("an actor-nonce reservation was quarantined; actor nonces continue above the clock (%d)",
                        reserved)
        self._seeds, self._sealed = {}, {}
        for stream_id, candidates in wrapped.items():
            self._open_seed(stream_id, candidates)
        if self._sealed:
            log.warning("%d stream seed(s) do not open under KEK %s (they name KEK %s); those streams are refused "
                        "until the key manager runs with the KEK they were wrapped under (docs/keymgr.md)",
                        len(self._sealed), self._kek.kek_id, ", ".join(sorted(set(self._sealed.values()))))
        self._reserved_through = reserved
        self._next_nonce = reserved + 1

    def _open_seed(self, stream_id: str, candidates: list[tuple[str, bytes, str]]) -> None:
        """The newest candidate that opens is the seed; a record that does not is quarantined."""
        for kek_id, blob, where in reversed(candidates):
            try:
                self._seeds[stream_id] = self._kek.unwrap(SEED_PURPOSE, stream_id, blob)
                return
            except KekError:
                log.warning("quarantined %s (seed/%s): it names KEK %s and does not open under KEK %s "
                            "(another KEK, altered or forged)", where, stream_id, kek_id, self._kek.kek_id)
        self._sealed[stream_id] = candidates[-1][0]

    @property
    def sealed_streams(self) -> dict[str, str]:
        """Streams whose stored seed this instance cannot open, with the KEK id their record names."""
        with self._lock:
            return dict(self._sealed)

    def _refuse_sealed(self, stream_id: str) -> None:
        kek_id = self._sealed.get(stream_id)
        if kek_id is not None:
            raise SeedSealedError(
                f"the master seed of stream {stream_id!r} is stored wrapped under KEK {kek_id}, not under this key "
                f"manager's KEK {self._kek.kek_id}; its operator restarts the key manager with that KEK "
                f"(docs/keymgr.md)"
            )

    def close(self) -> None:
        self._writer.close()

    # ------------------------------------------------------------------ writes
    def _write_locked(self, key: str, value: Record) -> None:
        self._write_all_locked([(key, value)])

    def _write_all_locked(self, records: Sequence[tuple[str, Record]]) -> None:
        """Commit `records` in one transaction (all or none)."""
        if self._fenced:
            raise VaultFencedError("another key-manager instance took over; send the request to it")

        def produce(producer: _RecordProducer) -> None:
            for key, value in records:
                producer.produce(self.topic, key=key.encode(), value=encode_keymgr_record(value),
                                 partition=STATE_PARTITION)

        try:
            self._writer.write(produce)
        except FencedError:
            self._fenced = True
            log.error("key-manager writer fenced by a newer instance; encryption stops here")
            raise VaultFencedError("another key-manager instance took over; send the request to it") from None
        except WriteFailedError as exc:
            raise NotReadyError(f"the key manager could not persist its state ({exc}); retry") from None

    def _reserve_locked(self) -> None:
        current = max(self._reserved_through, self._next_nonce - 1)
        target = min(current + self._block, MAX_ACTOR_NONCE)
        if target <= current:  # unreachable by counting; refused, never written or wrapped around
            raise NoncesExhaustedError(f"the key manager's actor nonces reached {MAX_ACTOR_NONCE}; its operator must "
                                "rotate the streams' keys (docs/keymgr.md)")
        self._write_locked(NONCE_KEY, NonceReservationRecord(KEYMGR_RECORD_VERSION, target))
        self._reserved_through = target

    def rewrap(self, new_kek: Kek) -> int:
        """KEK rotation: every stored seed wrapped again under `new_kek`, in one transaction.

        The records keep their keys, so compaction drops the old wrapped forms; from the commit on,
        only `new_kek` opens the state. Returns the number of seeds re-wrapped (a sealed seed, which
        this instance cannot open, is left as it is).
        """
        with self._lock:
            records = [
                (
                    seed_key(sid),
                    _wrapped(new_kek, sid, seed),
                )
                for sid, seed in sorted(self._seeds.items())
            ]
            if records:
                self._write_all_locked(records)
            self._kek = new_kek
            return len(records)

    # ------------------------------------------------------------------ reads
    def next_actor_nonce(self) -> int:
        """A fresh actor_nonce, never issued before by any instance of this deployment."""
        with self._lock:
            if self._fenced:
                raise VaultFencedError("another key-manager instance took over; send the request to it")
            if self._next_nonce > self._reserved_through:
                self._reserve_locked()
            nonce = self._next_nonce
            self._next_nonce += 1
            return nonce

    @property
    def reserved_through(self) -> int:
        return self._reserved_through

    def existing_seed(self, stream_id: str) -> bytes | None:
        """The stream's master seed if one was created (never creates one); NOT_READY when it is sealed."""
        with self._lock:
            self._refuse_sealed(stream_id)
            return self._seeds.get(stream_id)

    def seed_for(self, stream_id: str) -> bytes:
        """The stream's master seed, created (and committed wrapped) on first need; NOT_READY when sealed."""
        with self._lock:
            self._refuse_sealed(stream_id)
            seed = self._seeds.get(stream_id)
            if seed is None:
                seed = secrets.token_bytes(SEED_BYTES)
                self._write_locked(seed_key(stream_id), _wrapped(self._kek, stream_id, seed))
                self._seeds[stream_id] = seed
            return seed


def _wrapped(kek: Kek, stream_id: str, seed: bytes) -> WrappedSeedRecord:
    return WrappedSeedRecord(KEYMGR_RECORD_VERSION, kek.kek_id, kek.wrap(SEED_PURPOSE, stream_id, seed).hex())


__all__ = ["KekError", "SeedSealedError", "Vault", "VaultFencedError", "transactional_id"]
