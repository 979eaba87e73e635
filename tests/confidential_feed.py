"""A confidential private feed on a real stack, for the tests that look at it from outside.

`publish_confidential_feed` creates a PRIVATE_ALLOWLIST stream with ``confidential: true``,
allowlists one member, publishes one keyload sealed to the member's X25519 key and then the given
plaintexts masked under it, and waits until the read side shows them all. The tests then read the
feed the way a stranger would (a topic, a replay, a Spark export) and check that only ciphertext
and sealed boxes come out, and that the member's key opens them.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import nacl.public
import nacl.signing

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.private import ConfidentialPublisher
from watchtower.client.private_reader import ConfidentialReader
from watchtower.client.sdk import Publisher, wait_until_visible
from watchtower.protocol.confidential.keyload import Keyload, Recipient


@dataclasses.dataclass(frozen=True)
class ConfidentialFeed:
    """What a test needs of the feed: its id, the member, the keyload and the plaintexts
    (message 1 is the keyload, message 2 + i the plaintext i)."""

    stream_id: str
    member_address: str
    member_key: nacl.public.PrivateKey
    keyload: Keyload
    plaintexts: tuple[bytes, ...]

    def reader(self) -> ConfidentialReader:
        """The member's reader (its X25519 key)."""
        return ConfidentialReader(self.member_address, bytes(self.member_key))

    def secrets(self) -> dict[str, bytes]:
        """What must never appear in clear outside the publisher and the member."""
        return {"session key": self.keyload.session_key,
                **{f"plaintext #{i}": t for i, t in enumerate(self.plaintexts)}}


def publish_confidential_feed(api_url: str, home: Path, *, prefix: str, count: int,
                              timeout_s: float = 60.0) -> ConfidentialFeed:
    """A confidential feed of one keyload and `count` masked messages (module docstring)."""
    api = ApiClient(api_url)
    owner = Account(nacl.signing.SigningKey.generate(), name=f"{prefix}-owner", home=home)
    publisher = nacl.signing.SigningKey.generate()
    member = nacl.public.PrivateKey.generate()
    member_address = "0x" + bytes(nacl.signing.SigningKey.generate().verify_key).hex()
    sid = f"{prefix}-{uuid.uuid4().hex[:8]}"
    api.command(owner.sign("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex(),
                                                  "subscription_policy": "PRIVATE_ALLOWLIST", "confidential": True}))
    wait_until_visible(api, sid, timeout_s=timeout_s)
    pub = ConfidentialPublisher(Publisher(api, owner, sid, publisher))
    # `allow` returns once the read API shows the member on the allowlist: a rekey right after an
    # acknowledged allowlist_add may otherwise be refused as sealing to a non-member (the fold lags).
    pub.allow(member_address, timeout_s=timeout_s)
    keyload = pub.rekey([Recipient(member_address, 1, bytes(member.public_key))])
    texts = tuple(f"{prefix} plaintext {uuid.uuid4().hex}".encode() for _ in range(count))
    for text in texts:
        pub.publish("note", text)
    wait_until_visible(api, sid, min_head=1 + count, timeout_s=timeout_s)
    return ConfidentialFeed(sid, member_address, member, keyload, texts)
