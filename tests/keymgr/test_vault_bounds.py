"""A forged or corrupt actor-nonce reservation never stops the key manager, nor makes it reuse a nonce.

Pure: the vault's Kafka producer and its read of ``keymgr.state`` are replaced by in-memory fakes
(the transactional writes are recorded; tests/keymgr/test_vault_fencing.py covers the real broker).
Failed before the fix: a reservation of 2**64 - 1 was taken as the high-water mark, so the next
reservation and every actor nonce were past 2**64 and every encrypt failed.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from watchtower.keymgr import vault as vault_mod
from watchtower.keymgr.kek import Kek
from watchtower.protocol.constants import MAX_ACTOR_NONCE
from watchtower.protocol.errors import MalformedRecordError, NotReadyError
from watchtower.schemas.keymgr_records import (
    KEYMGR_RECORD_VERSION,
    NonceReservationRecord,
    decode_nonce_reservation,
    encode_keymgr_record,
)
from watchtower.workers.tx_writer import TransactionalWriter

KEK = Kek(bytes(range(32)))


class _Record:
    def __init__(self, key: str, value: bytes, offset: int) -> None:
        self._key, self._value, self._offset = key.encode(), value, offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def topic(self) -> str:
        return "wt.keymgr.state"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class _Producer:
    written: list[tuple[str, bytes]]

    def __init__(self, _config: Any) -> None:
        self.written = []

    def init_transactions(self, _timeout: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def commit_transaction(self, _timeout: float) -> None: ...
    def abort_transaction(self, _timeout: float) -> None: ...
    def flush(self, _timeout: float) -> int:
        return 0

    def produce(self, _topic: str, *, key: bytes, value: bytes, partition: int) -> None:  # noqa: ARG002
        self.written.append((key.decode(), value))


def _reservation(n: int) -> bytes:
    return encode_keymgr_record(NonceReservationRecord(KEYMGR_RECORD_VERSION, n))


def _vault(monkeypatch: pytest.MonkeyPatch, *values: bytes) -> vault_mod.Vault:
    records = [_Record(vault_mod.NONCE_KEY, v, i) for i, v in enumerate(values)]
    monkeypatch.setattr(vault_mod, "TransactionalWriter", partial(TransactionalWriter, factory=_Producer))
    monkeypatch.setattr(vault_mod, "read_committed", lambda *_a, **_k: iter(records))
    vault = vault_mod.Vault("127.0.0.1:1", "wt", KEK, nonce_block=10)
    vault.open()
    return vault


# The last two are within the record's bound but past any nonce a key manager could have handed out
# (they would exhaust the nonces and stop encryption): implausible, so quarantined too.
@pytest.mark.parametrize("forged", [2**64 - 1, 2**63 - 1, MAX_ACTOR_NONCE + 1, -1, MAX_ACTOR_NONCE - 5,
                                    (time.time_ns() // 1_000) * 2])
def test_an_implausible_reservation_is_quarantined_and_nonces_continue_above_the_clock(
        monkeypatch: pytest.MonkeyPatch, forged: int) -> None:
    before_us = time.time_ns() // 1_000
    vault = _vault(monkeypatch, _reservation(500), _reservation(forged))
    nonces = [vault.next_actor_nonce() for _ in range(25)]  # crosses two reservations
    assert all(before_us < n <= MAX_ACTOR_NONCE for n in nonces)
    assert nonces == sorted(set(nonces))
    committed = [decode_nonce_reservation(v).reserved_through for _, v in vault._writer.producer.written]
    assert committed
    assert all(c <= MAX_ACTOR_NONCE for c in committed)


def test_a_plausible_reservation_is_continued_from(monkeypatch: pytest.MonkeyPatch) -> None:
    vault = _vault(monkeypatch, _reservation(500), _reservation(1_000))
    assert vault.next_actor_nonce() == 1_001


def test_the_decoder_refuses_a_reservation_outside_its_bound() -> None:
    assert decode_nonce_reservation(_reservation(MAX_ACTOR_NONCE)).reserved_through == MAX_ACTOR_NONCE
    with pytest.raises(MalformedRecordError):
        decode_nonce_reservation(_reservation(2**64 - 1))


def test_the_vault_never_reserves_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A deployment whose clock is close to the bound (a reservation so high is plausible only then).
    monkeypatch.setattr(vault_mod, "clock_floor", lambda: MAX_ACTOR_NONCE - 100)
    vault = _vault(monkeypatch, _reservation(MAX_ACTOR_NONCE - 5))
    # The reservation at open would pass the bound: refused with NOT_READY, not written.
    assert vault.reserved_through == MAX_ACTOR_NONCE  # the last block is cut at the bound
    issued = [vault.next_actor_nonce() for _ in range(5)]  # what is left below the reservation
    assert issued[-1] == MAX_ACTOR_NONCE
    with pytest.raises(NotReadyError):
        vault.next_actor_nonce()
