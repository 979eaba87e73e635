"""Epoch keys sealed ahead of time for a reader: `pre_wrap`, `wrap_ahead` (the daemon's step) and
`rewrap` (the public CLI's ``pre-wrap-epochs``, ``wrap-daemon`` and ``rewrap-epochs``).

A reader decrypts an epoch with its content key, which the key manager seals to one of the reader's
account keys (``fetch_epoch_keys``) and the SDK keeps sealed on disk (`account_keys.store_sealed_keys`).
Fetching at the moment a new epoch starts puts a round trip to the key manager on the first message
of the epoch; sealing the next epochs ahead makes that key fetch a local read. Everything here goes
through the key manager's sealed-key path, so the same rules hold: only entitled epochs
(ENTITLEMENT_REQUIRED otherwise), only the account or its authorized actors, keys never leave
the boxes on disk. Every step is idempotent (an epoch already sealed to the wanted key is not
fetched again) and the store is locked while it is written, so two daemons are safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchtower.client.account_keys import load_sealed_keys
from watchtower.client.paid import EpochKeyRing


@dataclass(frozen=True, slots=True)
class WrapReport:
    """What one step did: the epochs it fetched now, and those it found already sealed."""

    stream_id: str
    fetched: list[int]
    already: list[int]

    def to_dict(self) -> dict[str, object]:
        return {"stream_id": self.stream_id, "fetched": self.fetched, "already": self.already}


def _held(ring: EpochKeyRing, stream_id: str, account_key_id: int | None) -> dict[int, int]:
    """epoch -> the account key id it is sealed to, for the epochs stored on this machine."""
    return {e: k for e, (k, _) in load_sealed_keys(ring.holder, stream_id).items()
            if account_key_id is None or k == account_key_id}


def _fetch_missing(ring: EpochKeyRing, stream_id: str, wanted: list[int], held: dict[int, int]) -> WrapReport:
    missing = [e for e in wanted if e not in held]
    fetched: list[int] = []
    run_start = None
    for i, epoch in enumerate(missing):  # contiguous runs: one request each
        run_start = epoch if run_start is None else run_start
        if i + 1 == len(missing) or missing[i + 1] != epoch + 1:
            fetched += ring.fetch(stream_id, run_start, epoch)
            run_start = None
    return WrapReport(stream_id, sorted(fetched), sorted(e for e in wanted if e in held))


def pre_wrap(ring: EpochKeyRing, stream_id: str, first: int, last: int) -> WrapReport:
    """Seal epochs `first`..`last` to the ring's account key now (those not already sealed to it)."""
    return _fetch_missing(ring, stream_id, list(range(first, last + 1)), _held(ring, stream_id, ring.account_key_id))


def wrap_ahead(ring: EpochKeyRing, stream_id: str, *, current_epoch: int, depth: int,
               entitled_until: int | None) -> WrapReport:
    """The daemon's step: epochs current..current+depth sealed, within the entitlement (an epoch not
    bought is not asked for; nothing bought: nothing to do)."""
    if entitled_until is None or entitled_until < current_epoch:
        return WrapReport(stream_id, [], [])
    return pre_wrap(ring, stream_id, current_epoch, min(current_epoch + depth, entitled_until))


def rewrap(ring: EpochKeyRing, stream_id: str, account_key_id: int, *, from_epoch: int = 0) -> WrapReport:
    """Seal again to `account_key_id` (the account's new ACTIVE key, after it rotated its account
    key) every stored epoch from `from_epoch` on that is sealed to another key."""
    stored = load_sealed_keys(ring.holder, stream_id)
    ring.account_key_id = account_key_id
    wanted = sorted(e for e, (k, _) in stored.items() if e >= from_epoch and k != account_key_id)
    report = _fetch_missing(ring, stream_id, wanted, {})
    already = sorted(e for e, (k, _) in stored.items() if e >= from_epoch and k == account_key_id)
    return WrapReport(stream_id, report.fetched, already)
