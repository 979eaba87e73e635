"""The demo's confidential private feed (docs/private-feeds.md): two members, one removed mid-stream.

The publisher's SDK seals a session key to each member's X25519 key in a keyload message of the
feed itself and masks every message under it; the platform stores and serves ciphertext only. When
the owner removes a member, the writer refuses the next message until a new keyload without that
member is published. A third member joins later and reads from its join, plus the history the
owner reseals to it; a ``pro`` branch has an audience and a keyload of its own.
"""

from __future__ import annotations

import click
import nacl.public
import nacl.signing

from watchtower.cli.demo_wait import STEP_TIMEOUT_S
from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.private import ConfidentialPublisher
from watchtower.client.private_reader import ConfidentialReader
from watchtower.client.sdk import Publisher, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.confidential.keyload import KEYLOAD_KIND, Recipient
from watchtower.protocol.confidential.reseal import RESEAL_KIND
from watchtower.protocol.errors import WatchtowerError


class _Member:
    def __init__(self, name: str) -> None:
        self.name = name
        self.address = address_from_public_key(bytes(nacl.signing.SigningKey.generate().verify_key))
        self.x25519 = nacl.public.PrivateKey.generate()

    def recipient(self) -> Recipient:
        return Recipient(self.address, 1, bytes(self.x25519.public_key))

    def reads(self, api: ApiClient, stream_id: str) -> list[str]:
        """What this member reads of each masked message: its text, or the refusal's code."""
        reader, out = ConfidentialReader(self.address, bytes(self.x25519)), []
        messages = Subscriber(api, stream_id).poll(20)  # every signature verified first
        reader.prime(messages)  # keyloads and reseals first: a reseal opens what came before it
        for msg in messages:
            try:
                opened = reader.read(msg)
            except WatchtowerError as exc:
                out.append(exc.code)
                continue
            if msg.kind not in (KEYLOAD_KIND, RESEAL_KIND):
                out.append((opened.plaintext or b"").decode())
        return out


def show_confidential_feed(api: ApiClient, owner: Account) -> None:
    """Create a confidential feed, publish to two members, remove one, re-key, let a third join with
    resealed history, and publish on a second branch."""
    click.secho("  -- a confidential private feed: keyloads to two members, one removed mid-stream", bold=True)
    publisher_key = nacl.signing.SigningKey.generate()
    alice, bob = _Member("alice"), _Member("bob")
    sid = f"conf-{bytes(publisher_key.verify_key).hex()[:12]}"
    api.command(owner.sign("create_stream", sid, {
        "publisher_key_hex": bytes(publisher_key.verify_key).hex(), "subscription_policy": "PRIVATE_ALLOWLIST",
        "confidential": True}))
    wait_until_visible(api, sid, timeout_s=STEP_TIMEOUT_S)
    pub = ConfidentialPublisher(Publisher(api, owner, sid, publisher_key))
    # A keyload seals only to members the read API shows on the allowlist: `allow` adds them and
    # waits until it does (the projection workers fold an acknowledged change a moment later).
    pub.allow(alice.address, bob.address, timeout_s=STEP_TIMEOUT_S)
    before = pub.rekey([alice.recipient(), bob.recipient()])
    pub.publish("note", b"before bob left #1")
    pub.publish("note", b"before bob left #2")
    api.command(owner.sign("allowlist_remove", sid, {"address": bob.address}))
    try:
        pub.publish("note", b"too early")
        raise click.ClickException("the writer accepted a message under a keyload that still names bob")
    except WatchtowerError as exc:
        click.echo(f"  bob removed: the next message is refused until a re-key ({exc.code})")
    pub.rekey([alice.recipient()])
    pub.publish("note", b"after bob left")
    carol = _Member("carol")
    pub.allow(carol.address, timeout_s=STEP_TIMEOUT_S)
    pub.rekey([alice.recipient(), carol.recipient()])
    pub.publish("note", b"after carol joined")
    pub.reseal(before.keyload_id, before.session_key, [carol.recipient()])
    click.echo("  carol joined: she reads from her join, and the owner reseals the first keyload to her")
    pro = ConfidentialPublisher(pub.publisher, branch="pro")
    pro.rekey([alice.recipient()])
    pro.publish("note", b"pro only")
    click.echo("  branch pro: its own keyload, for alice alone")
    wait_until_visible(api, sid, min_head=10, timeout_s=STEP_TIMEOUT_S)  # 4 keyloads, 1 reseal, 5 notes
    stored = Subscriber(api, sid).poll(20)
    masked = [m for m in stored if m.kind not in (KEYLOAD_KIND, RESEAL_KIND)]
    click.echo(f"  feed {sid}: {len(stored)} messages; what the platform serves is ciphertext: "
               f"{masked[0].payload_inline[:12].hex()}…")
    for member in (alice, bob, carol):
        click.echo(f"  {member.name} reads: {member.reads(api, sid)}")
