"""Confidential private feeds in the SDK: keyloads out, masked payloads in (protocol.confidential.keyload).

The publisher's side (`ConfidentialPublisher`) makes a fresh session key for a branch, seals it to
every member's X25519 account key and publishes the keyload in the stream itself, as messages of
kind ``wt.keyload`` (one per part, signed and sequenced like any message); every later message of
the branch carries a masked payload and the tags ``wt.keyload`` (the keyload id) and ``wt.branch``.
A member's side (`private_reader.ConfidentialReader`) takes the verified messages a `Subscriber`
hands out, opens the keyloads it belongs to with its X25519 private key, and unmasks the payloads.

Neither the session key nor a plaintext ever leaves these two objects: the API, the worker, the
read side, the replay and push paths only store and forward ciphertext and sealed boxes.

Membership changes re-key: after a member leaves, call `rekey` with the remaining members before
the next message (a member removed keeps what it could open before, and opens nothing after).
`refresh` re-keys whenever the audience differs from the current keyload's: a member added or
removed, or a member's account key rotated or revoked (`member_recipients` reads every member's
newest active key). A member added later reads from its join; the owner may `reseal` chosen past
keyloads to it (the owner, a member of every keyload, opens them from the log).

An allowlist change is acknowledged by the writer, but `rekey` checks the audience against the
read API, whose allowlist comes from the projection workers a moment later: sealing to a member
added an instant ago is refused (UNAUTHORIZED, "not on the allowlist") until they have folded it.
So add members with `allow`, which waits until the read API shows them (`wait_until_allowlisted`,
bounded, TIMEOUT naming who is missing), or give `rekey` a `wait_s`.

Branches: one `ConfidentialPublisher` per branch, each with its own audience and keyload; every
message names its branch in the signed ``wt.branch`` tag, so a subscriber filters by branch with
the filter DSL (``{"field": "tags.wt.branch", "op": "eq", "value": "pro"}``: a branch's keyload
parts and reseals carry the tag too, so that filter alone gives a member all it needs).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

from watchtower.client.sdk import Publisher
from watchtower.protocol.confidential.audience import (
    AudienceDrift,
    audience_drift,
    require_current_audience,
    require_sealable,
)
from watchtower.protocol.confidential.keyload import (
    BRANCH_TAG,
    KEYLOAD_ID_TAG,
    KEYLOAD_KIND,
    Keyload,
    Member,
    Recipient,
    build_keyload,
    decode_part,
)
from watchtower.protocol.confidential.reseal import RESEAL_KIND, build_reseals
from watchtower.protocol.confidential.session_key import DEFAULT_BRANCH, mask, require_branch
from watchtower.protocol.constants import ACCOUNT_KEY_SCHEME_X25519, DEFAULT_CONTENT_TYPE
from watchtower.protocol.errors import (
    InvalidArgumentError,
    NotReadyError,
    RequestTimeoutError,
    StaleSequenceError,
    StreamNotFoundError,
    UnauthorizedError,
)
from watchtower.protocol.stream.message import TagValue

#: Tags of a masked message: which keyload's key masks it, and its branch.
TAG_KEYLOAD: Final = KEYLOAD_ID_TAG
TAG_BRANCH: Final = BRANCH_TAG
#: Tags of a keyload part: its keyload, branch, part number and count, and its address range.
TAG_PART: Final = "wt.part"
TAG_PARTS: Final = "wt.parts"
TAG_FIRST: Final = "wt.first"
TAG_LAST: Final = "wt.last"
KEYLOAD_CONTENT_TYPE: Final = "application/cbor"
#: How long `allow` waits, by default, for the read API to show the members it added.
ALLOWLIST_WAIT_S: Final = 10.0


@runtime_checkable
class AudienceApi(Protocol):
    """What a confidential publisher reads before it seals or masks (`ApiClient` and `FakeApi` have it)."""

    def stream_info(self, stream_id: str) -> dict[str, Any]: ...

    def account_info(self, address: str) -> dict[str, Any]: ...


class ConfidentialPublisher:
    """Masks every message of one branch under the branch's current keyload (see the module docstring).

    Before it seals a keyload or masks a message it reads the stream's allowlist and each member's
    account keys from the API (`audience`; protocol.confidential.audience): nothing is sealed or masked
    for a member who left the allowlist or whose sealed account key was revoked or superseded. A
    message under such a keyload is refused with UNAUTHORIZED before anything is sent, or, with
    `rekey_on_change`, a new keyload is published first for the members that remain, each under its
    newest ACTIVE key (one without any is left out: `left_out`). That is one stream read plus one
    account read per member for every message; a change between that check and the publish is
    still refused by the writer for a removal.
    """

    def __init__(self, publisher: Publisher, *, branch: str = DEFAULT_BRANCH, rekey_on_change: bool = False) -> None:
        self.publisher = publisher
        self.branch = require_branch(branch)
        self.rekey_on_change = rekey_on_change
        #: The members the last automatic re-key left out, for having no ACTIVE X25519 account key.
        self.left_out: list[str] = []
        self._keyload: Keyload | None = None

    @property
    def keyload_id(self) -> bytes | None:
        """The id of the keyload masking the next message (None before the first `rekey`)."""
        return None if self._keyload is None else self._keyload.keyload_id

    def allow(self, *addresses: str, timeout_s: float = ALLOWLIST_WAIT_S) -> dict[str, Any]:
        """Add `addresses` to the stream's allowlist (signed by the owner) and wait until the read API
        shows every one of them there, so a `rekey` to them right after is not refused; returns the
        stream's info. TIMEOUT after `timeout_s` naming who is not shown yet (`wait_until_allowlisted`)."""
        api = self.publisher.api
        for address in addresses:
            api.command(self.publisher.owner.sign("allowlist_add", self.publisher.stream_id, {"address": address}))
        return wait_until_allowlisted(_audience_api(api), self.publisher.stream_id, addresses, timeout_s=timeout_s)

    def rekey(self, members: Iterable[Recipient], *, wait_s: float = 0.0) -> Keyload:
        """Publish a new keyload for `members` (the owner among them, to read its own feed); every
        later message is masked under it. Returns it (its `session_key` stays in this process).
        UNAUTHORIZED, with nothing built or sent, for a member off the allowlist or under a revoked
        or superseded account key (`audience`). With `wait_s`, a member the read API does not show
        on the allowlist yet (an allowlist_add just acknowledged) is waited for that long first."""
        recipients = list(members)
        chosen = [Member(r.address, r.account_key_id) for r in recipients]
        drift = self.audience(chosen)
        if drift.removed and wait_s > 0:
            with contextlib.suppress(RequestTimeoutError):  # refused just below, naming who is off the allowlist
                wait_until_allowlisted(_audience_api(self.publisher.api), self.publisher.stream_id, drift.removed,
                                       timeout_s=wait_s)
            drift = self.audience(chosen)
        require_sealable(drift, stream_id=self.publisher.stream_id)
        keyload = build_keyload(self.publisher.stream_id, recipients, branch=self.branch)
        parts = [decode_part(p) for p in keyload.parts]
        for raw, part in zip(keyload.parts, parts, strict=True):
            tags: dict[str, TagValue] = {TAG_KEYLOAD: keyload.keyload_id.hex(), TAG_BRANCH: self.branch,
                                         TAG_PART: float(part.part), TAG_PARTS: float(part.parts),
                                         TAG_FIRST: part.first, TAG_LAST: part.last}
            self.publisher.publish(KEYLOAD_KIND, raw, tags, KEYLOAD_CONTENT_TYPE)
        self._keyload = keyload
        return keyload

    def audience(self, members: Iterable[Member] | None = None) -> AudienceDrift:
        """How `members` (default: the current keyload's) differ from who may read now: the stream's
        owner and allowlist and each member's account keys, read from the API."""
        api = _audience_api(self.publisher.api)
        if members is None:
            if self._keyload is None:
                raise InvalidArgumentError("no keyload yet: call rekey(members) before the first message")
            members = self._keyload.members
        chosen = list(members)
        info = api.stream_info(self.publisher.stream_id)
        confidential = (info.get("config") or {}).get("confidential") is True
        keys = {address: account_key_statuses(api.account_info(address)) for address in {m.address for m in chosen}}
        return audience_drift(chosen, owner=str(info.get("owner")),
                              allowlist=frozenset(info.get("allowlist") or ()) if confidential else None,
                              account_keys=keys)

    def resume(self, keyload: Keyload) -> None:
        """Mask the next messages under `keyload`, already published (e.g. the current keyload, which
        the owner opened from the log in another process)."""
        self._keyload = keyload

    def refresh(self, members: Iterable[Recipient]) -> Keyload | None:
        """Re-key if `members` (address and account key id) differ from the current keyload's:
        someone added or removed, or an account key rotated or revoked. Returns the new keyload,
        or None when the current one still seals to exactly these keys."""
        recipients = list(members)
        wanted = sorted((r.address, r.account_key_id) for r in recipients)
        if self._keyload is not None and wanted == [(m.address, m.account_key_id) for m in self._keyload.members]:
            return None
        return self.rekey(recipients)

    def reseal(self, keyload_id: bytes, session_key: bytes, members: Iterable[Recipient]) -> list[dict[str, Any]]:
        """Seal a past keyload of this branch (its id and session key) to `members`, who then open
        what it masked: the owner's choice of history for a new member. One message per 16 KiB."""
        replies = []
        for raw in build_reseals(self.publisher.stream_id, members, branch=self.branch, keyload_id=keyload_id,
                                 session_key=session_key):
            tags: dict[str, TagValue] = {TAG_KEYLOAD: keyload_id.hex(), TAG_BRANCH: self.branch}
            replies.append(self.publisher.publish(RESEAL_KIND, raw, tags, KEYLOAD_CONTENT_TYPE))
        return replies

    def publish(self, kind: str, plaintext: bytes, tags: Mapping[str, TagValue] | None = None,
                content_type: str = DEFAULT_CONTENT_TYPE) -> dict[str, Any]:
        """Mask `plaintext` for the next sequence and publish it. Should another writer take that
        sequence first (STALE_SEQUENCE), it is masked again for the new head, once."""
        if self._keyload is None:
            raise InvalidArgumentError("no keyload yet: call rekey(members) before the first message")
        if kind in (KEYLOAD_KIND, RESEAL_KIND):
            raise InvalidArgumentError(f"the kind {kind!r} is reserved for keyloads")
        for name in (TAG_KEYLOAD, TAG_BRANCH):
            if tags and name in tags:
                raise InvalidArgumentError(f"the tag {name!r} is set by the confidential publisher")
        self._require_audience()
        all_tags: dict[str, TagValue] = {**(tags or {}), TAG_KEYLOAD: self._keyload.keyload_id.hex(),
                                         TAG_BRANCH: self.branch}
        for attempt in range(2):
            head = self.publisher.head if self.publisher.head is not None else self.publisher.sync()
            sequence = head + 1
            masked = mask(self._keyload.session_key, keyload_id=self._keyload.keyload_id,
                          stream_id=self.publisher.stream_id, sequence=sequence, branch=self.branch, kind=kind,
                          content_type=content_type, plaintext=plaintext)
            try:
                return self.publisher.publish(kind, masked, all_tags, content_type, sequence=sequence)
            except StaleSequenceError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _require_audience(self) -> None:
        """Refuse (or, with `rekey_on_change`, re-key) before masking for a stale audience."""
        assert self._keyload is not None
        drift = self.audience()
        if drift.clean:
            return
        if not self.rekey_on_change:
            require_current_audience(drift, stream_id=self.publisher.stream_id, branch=self.branch,
                                     keyload_id=self._keyload.keyload_id)
        api = self.publisher.api
        assert isinstance(api, AudienceApi)
        remaining = {m.address for m in self._keyload.members} - set(drift.removed)
        recipients, self.left_out = member_recipients(api, remaining)
        if not recipients:
            raise UnauthorizedError(
                f"no member of keyload {self._keyload.keyload_id.hex()} of branch {self.branch!r} may still be sealed "
                f"to ({drift.details()}); re-key with the audience you want (`watchtower feed "
                f"{self.publisher.stream_id} rekey --branch {self.branch}`)", details=drift.details())
        self.rekey(recipients)


def _audience_api(api: object) -> AudienceApi:
    if not isinstance(api, AudienceApi):
        raise InvalidArgumentError("a confidential publisher reads the allowlist and the members' account keys "
                                   "before it seals or masks: its API needs stream_info and account_info")
    return api


def wait_until_allowlisted(api: AudienceApi, stream_id: str, addresses: Iterable[str], *,
                           timeout_s: float = ALLOWLIST_WAIT_S) -> dict[str, Any]:
    """Wait until the read API shows each of `addresses` on the stream's allowlist (the owner needs
    no entry); return the stream's info.

    An allowlist_add is acknowledged by the writer; the read API shows it once the projection
    workers have folded it, a moment later (longer while they restart or rebalance). TIMEOUT after
    `timeout_s`, naming the addresses not shown yet.
    """
    wanted = set(addresses)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = api.stream_info(stream_id)
            missing = wanted - set(info.get("allowlist") or ()) - {str(info.get("owner"))}
        except (NotReadyError, StreamNotFoundError):
            missing = wanted  # the read side is catching up, or has not shown the stream yet
        if not missing:
            return info
        if time.monotonic() >= deadline:
            raise RequestTimeoutError(
                f"the read API does not show {', '.join(sorted(missing))} on the allowlist of {stream_id} after "
                f"{timeout_s:g}s: if the allowlist_add was acknowledged, the projection workers have not folded it "
                "yet (check `watchtower up`), so retry; otherwise add them first",
                details={"stream_id": stream_id, "missing": ", ".join(sorted(missing))})
        time.sleep(0.05)


def newest_active_key(account: Mapping[str, Any]) -> tuple[int, bytes] | None:
    """(id, X25519 public key) of the newest ACTIVE account key in a ``GET /v1/accounts/{address}``
    body, or None: the key a keyload seals to."""
    active = [k for k in account.get("keys", []) if k.get("status") == "ACTIVE"
              and k.get("scheme", ACCOUNT_KEY_SCHEME_X25519) == ACCOUNT_KEY_SCHEME_X25519]
    if not active:
        return None
    newest = max(active, key=lambda k: int(k["account_key_id"]))
    return int(newest["account_key_id"]), bytes.fromhex(newest["public_key_hex"])


def account_key_statuses(account: Mapping[str, Any]) -> dict[int, str]:
    """{account key id: status} of the X25519 keys in a ``GET /v1/accounts/{address}`` body."""
    return {int(k["account_key_id"]): str(k.get("status")) for k in account.get("keys", [])
            if k.get("scheme", ACCOUNT_KEY_SCHEME_X25519) == ACCOUNT_KEY_SCHEME_X25519}


def member_recipients(api: AudienceApi, addresses: Iterable[str]) -> tuple[list[Recipient], list[str]]:
    """The recipients of a keyload for `addresses`: each member's newest active account key, read
    from the API, and the addresses that have none (they cannot be sealed to: register a key).
    A rotated key (a newer one registered) or a revoked one changes the result, so a publisher
    that calls `ConfidentialPublisher.refresh` with it re-keys."""
    recipients, missing = [], []
    for address in sorted(set(addresses)):
        found = newest_active_key(api.account_info(address))  # an API error stops: no member is dropped silently
        if found is None:
            missing.append(address)
        else:
            recipients.append(Recipient(address, found[0], found[1]))
    return recipients, missing


__all__ = ["AudienceApi", "ConfidentialPublisher", "account_key_statuses", "member_recipients", "newest_active_key"]
