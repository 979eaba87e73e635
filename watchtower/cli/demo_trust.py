"""The demo's "trust no server" part: key chains and proven filtered pages, against honest and lying APIs.

A lying API is the real HTTP client with one answer edited on the way in, exactly what a compromised
projection or a man in the middle could serve; the SDK must refuse it on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click
import nacl.signing

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import sign_command


class _ForgedKeyApi(ApiClient):
    """Serves one more publisher key, "rotated" by a command the attacker signed, not the owner."""

    def __init__(self, base_url: str, attacker: nacl.signing.SigningKey) -> None:
        super().__init__(base_url)
        self._attacker = attacker

    def key_history(self, stream_id: str, from_signing_key_id: int = 1, limit: int = 100) -> dict[str, Any]:
        page = super().key_history(stream_id, from_signing_key_id, limit)
        entries = list(page["entries"])
        last = entries[-1]
        rotate = sign_command(self._attacker, "rotate_publisher_key", stream_id, 1,
                              {"new_key": bytes(self._attacker.verify_key)})
        entries.append({"signing_key_id": last["signing_key_id"] + 1,
                        "publisher_key": bytes(self._attacker.verify_key).hex(),
                        "effective_sequence": last["effective_sequence"] + 1_000_000,
                        "command": rotate.to_dict()})
        return {"entries": entries, "next_from": None}


class _WithholdingApi(ApiClient):
    """Answers a proven filtered page with its first matching message silently dropped."""

    def get_since(self, stream_id: str, cursor: int = 0, limit: int = 100, **kw: Any) -> dict[str, Any]:
        page = super().get_since(stream_id, cursor, limit, **kw)
        return {**page, "messages": page["messages"][1:]}


def _refused(label: str, call: Callable[[], object]) -> None:
    try:
        call()
        click.echo(f"  {label}: unexpectedly accepted")
    except WatchtowerError as err:
        click.echo(f"  {label}: refused [{err.code}] {err.message[:150]}")


def show_client_side_trust(api: ApiClient, owner: Account, stream_id: str, flt: Mapping[str, Any]) -> None:
    """Verify the key chain and a proven filtered page, then show both refusing a lying API."""
    click.secho("  -- the client trusts no server: key chains and proven filtered pages", bold=True)
    schedule = Subscriber(api, stream_id, expected_owner=owner.address).key_schedule()
    click.echo(f"  key chain of {len(schedule.entries)} keys verified from the owner's address "
               f"{owner.address[:14]}… (each key carries the owner's signed command)")
    proven = Subscriber(api, stream_id, filter=dict(flt), proof=True)
    page = proven.poll_page(100)
    raw = api.get_since(stream_id, 0, 100, filter=dict(flt), proof=True)
    click.echo(f"  proven filtered page: sequences {[m.sequence for m in page.messages]} delivered, "
               f"{len(raw['proof']['skipped'])} skipped ones proven not to match (signed headers, no payloads)")
    attacker = nacl.signing.SigningKey.generate()
    _refused("a key the owner never signed, served by a lying API",
             lambda: Subscriber(_ForgedKeyApi(api.base_url, attacker), stream_id).key_schedule())
    _refused("a proven page with a matching message withheld",
             lambda: Subscriber(_WithholdingApi(api.base_url), stream_id, filter=dict(flt), proof=True).poll(100))
