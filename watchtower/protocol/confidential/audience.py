"""The publisher's rule for a confidential feed: mask nothing for a reader who may no longer read.

The writer refuses a masked message after a member left the allowlist, but only once the signed
publish has reached it: by then the masked payload sits on the ``commands`` topic, where the
removed member's X25519 key opens it. The writer cannot see account keys at all (another
aggregate's fact). So the publisher checks, before it masks, that its current keyload's audience is
still one it may seal to:

- **removed**: a member that is neither the stream's owner nor on its allowlist (on a confidential
  stream, where the writer holds keyloads to the allowlist; a keyload on any other stream is the
  publisher's own convention, and only its keys are checked);
- **revoked**: a member whose sealed account key is no longer ACTIVE (CIP-7: a revoked key is never
  used for key wrapping again);
- **rotated**: a member holding an ACTIVE X25519 account key newer than the one sealed to (the
  member moved on; the old key may be why).

A key id the account view does not list (sealed to a key handed to the SDK directly, never
registered) is the publisher's own choice and is not judged here. Any drift refuses the message
with UNAUTHORIZED, names who and why, and says how to re-key; nothing is masked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from watchtower.protocol.confidential.keyload import Member
from watchtower.protocol.errors import UnauthorizedError
from watchtower.protocol.ledger.account_state import ACTIVE


@dataclasses.dataclass(frozen=True, slots=True)
class AudienceDrift:
    """How a keyload's audience differs from who may read now (each in address order)."""

    removed: tuple[str, ...] = ()
    revoked: tuple[Member, ...] = ()
    rotated: tuple[Member, ...] = ()

    @property
    def clean(self) -> bool:
        """True when every member may still be sealed to under the key the keyload used."""
        return not (self.removed or self.revoked or self.rotated)

    def details(self) -> dict[str, Any]:
        """The refusal's details: addresses, and (address, account key id) of stale keys."""
        return {"removed": list(self.removed),
                "revoked_keys": [{"address": m.address, "account_key_id": m.account_key_id} for m in self.revoked],
                "rotated_keys": [{"address": m.address, "account_key_id": m.account_key_id} for m in self.rotated]}


def audience_drift(members: Iterable[Member], *, owner: str, allowlist: Collection[str] | None,
                   account_keys: Mapping[str, Mapping[int, str]]) -> AudienceDrift:
    """Compare a keyload's `members` with the stream's `owner` and `allowlist` (None: a stream that
    is not confidential, no membership rule) and each member's X25519 account keys (`account_keys`:
    address -> {account key id: status}) (module docstring)."""
    removed: set[str] = set()
    revoked: set[Member] = set()
    rotated: set[Member] = set()
    for member in members:
        if allowlist is not None and member.address != owner and member.address not in allowlist:
            removed.add(member.address)
            continue
        keys = account_keys.get(member.address, {})
        status = keys.get(member.account_key_id)
        if status is not None and status != ACTIVE:
            revoked.add(member)
        elif any(kid > member.account_key_id and st == ACTIVE for kid, st in keys.items()):
            rotated.add(member)
    return AudienceDrift(tuple(sorted(removed)), tuple(sorted(revoked, key=_order)), tuple(sorted(rotated, key=_order)))


def _order(member: Member) -> tuple[str, int]:
    return member.address, member.account_key_id


def require_current_audience(drift: AudienceDrift, *, stream_id: str, branch: str, keyload_id: bytes) -> None:
    """UNAUTHORIZED, before anything is masked, unless `drift` is clean (module docstring)."""
    if drift.clean:
        return
    why = [f"{', '.join(drift.removed)} left the allowlist"] if drift.removed else []
    why += [f"account key {m.account_key_id} of {m.address} was revoked" for m in drift.revoked]
    why += [f"{m.address} has an account key newer than {m.account_key_id}" for m in drift.rotated]
    raise UnauthorizedError(
        f"keyload {keyload_id.hex()} of branch {branch!r} of confidential stream {stream_id!r} seals to readers it may "
        f"no longer seal to ({'; '.join(why)}); nothing was masked or sent. Re-key first: "
        f"`watchtower feed {stream_id} rekey --branch {branch}` (or publish with --rekey; in the SDK "
        "ConfidentialPublisher(..., rekey_on_change=True) or refresh)", details=drift.details())


def require_sealable(drift: AudienceDrift, *, stream_id: str) -> None:
    """UNAUTHORIZED, before a new keyload is built, unless every recipient may be sealed to under the
    key given (`drift` of the recipients, as `audience_drift` computes it)."""
    if drift.clean:
        return
    why = [f"{address} is not on the allowlist (removed, or never added)" for address in drift.removed]
    why += [f"account key {m.account_key_id} of {m.address} is revoked" for m in drift.revoked]
    why += [f"{m.address} has an account key newer than {m.account_key_id}" for m in drift.rotated]
    raise UnauthorizedError(
        f"a keyload of confidential stream {stream_id!r} cannot seal to {'; '.join(why)}: seal only to the allowlist's "
        "current members, each under its newest ACTIVE X25519 account key (`member_recipients` reads them; "
        f"`watchtower feed {stream_id} rekey` does it for you)", details=drift.details())
