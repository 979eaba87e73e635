"""Epoch keys sealed ahead of time for a reader (`client.prewrap`; the CLI's pre-wrap-epochs,
wrap-daemon and rewrap-epochs). Pure: the key manager is a fake that seals real boxes to the
reader's real account keys and refuses epochs outside the entitlement, as the service does.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import nacl.signing
import pytest

from watchtower.client.account import Account
from watchtower.client.account_keys import commit_pending_key, load_sealed_keys, new_pending_key
from watchtower.client.keymgr import SealedEpochKeys
from watchtower.client.paid import EpochKeyRing
from watchtower.client.prewrap import pre_wrap, rewrap, wrap_ahead
from watchtower.protocol.confidential.envelope import wrap_epoch_key
from watchtower.protocol.errors import EntitlementRequiredError

SID = "s-prewrap"


def content_key(epoch: int) -> bytes:
    return hashlib.sha256(f"{SID}/{epoch}".encode()).digest()


class FakeKeymgr:
    def __init__(self, public_keys: dict[int, bytes], active: int, entitled_until: int) -> None:
        self.public_keys, self.active, self.entitled_until = public_keys, active, entitled_until
        self.asked: list[tuple[int, int, int]] = []
        self._lock = threading.Lock()

    def epoch_keys(self, _caller: Account, stream_id: str, *, account: str, from_key_epoch: int,  # noqa: ARG002
                   to_key_epoch: int, account_key_id: int | None = None) -> SealedEpochKeys:
        assert stream_id == SID
        if to_key_epoch > self.entitled_until:
            raise EntitlementRequiredError(f"epoch {to_key_epoch} is not covered")
        key_id = account_key_id or self.active
        with self._lock:
            self.asked.append((from_key_epoch, to_key_epoch, key_id))
        return SealedEpochKeys(key_id, {e: wrap_epoch_key(content_key(e), self.public_keys[key_id])
                                        for e in range(from_key_epoch, to_key_epoch + 1)})


@pytest.fixture
def reader(tmp_path: Path) -> Account:
    return Account(nacl.signing.SigningKey(b"\x33" * 32), name="reader", home=tmp_path)


def add_key(account: Account, key_id: int) -> bytes:
    private, _ = new_pending_key(account)
    commit_pending_key(account, key_id)
    return bytes(private.public_key)


class ActiveKeys:
    """The API's account view, every account key the fake key manager seals to ACTIVE."""

    def __init__(self, keymgr: FakeKeymgr) -> None:
        self.keymgr = keymgr

    def account_info(self, address: str) -> dict[str, object]:
        keys = [{"account_key_id": i, "status": "ACTIVE"} for i in self.keymgr.public_keys]
        return {"account": address, "keys": keys}


def ring_for(reader: Account, keymgr: FakeKeymgr, key_id: int | None = None) -> EpochKeyRing:
    return EpochKeyRing(keymgr, reader, account_key_id=key_id, accounts=ActiveKeys(keymgr))  # type: ignore[arg-type]


def test_pre_wrap_seals_a_range_once_and_reading_it_asks_the_key_manager_nothing(reader: Account) -> None:
    keymgr = FakeKeymgr({1: add_key(reader, 1)}, active=1, entitled_until=20)
    report = pre_wrap(ring_for(reader, keymgr, 1), SID, 10, 14)
    assert (report.fetched, report.already) == ([10, 11, 12, 13, 14], [])
    again = pre_wrap(ring_for(reader, keymgr, 1), SID, 12, 16)
    assert (again.fetched, again.already) == ([15, 16], [12, 13, 14])
    assert keymgr.asked == [(10, 14, 1), (15, 16, 1)]
    fresh = ring_for(reader, keymgr)  # another process: reads the sealed store, asks nothing
    assert fresh.content_key(SID, 13) == content_key(13)
    assert len(keymgr.asked) == 2


def test_the_daemon_step_keeps_depth_epochs_ahead_within_the_entitlement(reader: Account) -> None:
    keymgr = FakeKeymgr({1: add_key(reader, 1)}, active=1, entitled_until=12)
    ring = ring_for(reader, keymgr, 1)
    assert wrap_ahead(ring, SID, current_epoch=10, depth=5, entitled_until=12).fetched == [10, 11, 12]
    assert wrap_ahead(ring, SID, current_epoch=11, depth=5, entitled_until=12).fetched == []  # nothing new
    assert wrap_ahead(ring, SID, current_epoch=13, depth=5, entitled_until=12).fetched == []  # not bought
    assert wrap_ahead(ring, SID, current_epoch=10, depth=5, entitled_until=None).fetched == []
    assert keymgr.asked == [(10, 12, 1)]


def test_two_daemons_at_once_lose_nothing(reader: Account) -> None:
    keymgr = FakeKeymgr({1: add_key(reader, 1)}, active=1, entitled_until=400)
    errors: list[BaseException] = []

    def daemon(offset: int) -> None:
        try:
            for start in range(offset, 400, 20):
                pre_wrap(ring_for(reader, keymgr, 1), SID, start, start + 9)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=daemon, args=(o,)) for o in (0, 10, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(load_sealed_keys(reader, SID)) == list(range(400))


def test_rewrap_seals_the_stored_epochs_again_to_the_new_account_key(reader: Account) -> None:
    keymgr = FakeKeymgr({1: add_key(reader, 1)}, active=1, entitled_until=20)
    pre_wrap(ring_for(reader, keymgr, 1), SID, 3, 6)
    keymgr.public_keys[2] = add_key(reader, 2)
    report = rewrap(ring_for(reader, keymgr), SID, 2, from_epoch=4)
    assert (report.fetched, report.already) == ([4, 5, 6], [])
    stored = load_sealed_keys(reader, SID)
    assert {e: k for e, (k, _) in stored.items()} == {3: 1, 4: 2, 5: 2, 6: 2}
    assert rewrap(ring_for(reader, keymgr), SID, 2, from_epoch=4).fetched == []  # idempotent
    assert ring_for(reader, keymgr).content_key(SID, 5) == content_key(5)


def test_pre_wrap_of_an_epoch_not_bought_is_entitlement_required(reader: Account) -> None:
    keymgr = FakeKeymgr({1: add_key(reader, 1)}, active=1, entitled_until=5)
    with pytest.raises(EntitlementRequiredError):
        pre_wrap(ring_for(reader, keymgr, 1), SID, 4, 6)
