"""The WatchtowerRegistry: a named-feed index with sequential feed ids (pure).

A feed is listed when its stream is created with a ``feed`` object (``{"name", "description"}``)
in the create_stream body. The stream's partition owner decides the creation; in the same Kafka
transaction it forwards the signed create command to the registry aggregate (one key,
``REGISTRY_KEY``, so one partition and one writer), which assigns the next feed id. Because the
forward happens inside the transaction that creates the stream, a stream is listed if and only if
it was created with a listing, exactly once, whatever crashes in between.

The registry re-verifies the create command's signature, so a listing always names the account
that signed the creation. Registration is idempotent per stream id: a second forward of the same
stream (a retried create) answers with the feed id it already has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.commands import FeedListing, peek_body
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.events import FeedRegistered
from watchtower.protocol.signed_command import Command, Method, command_digest, verify_command
from watchtower.protocol.stream.state import Event, FrozenMap
from watchtower.protocol.validation import require_int

REGISTRY_KEY: Final = "registry"
"""The Kafka key (and event stream_id) of the registry aggregate."""

MAX_FEED_NAME: Final = 64
MAX_FEED_DESCRIPTION: Final = 280


def parse_feed_listing(value: object) -> dict[str, str]:
    """A create_stream body's ``feed`` object as ``{"name", "description"}``; INVALID_ARGUMENT if bad."""
    if not isinstance(value, Mapping):
        raise InvalidArgumentError('feed must be an object like {"name": "btc-usd", "description": "..."}')
    unknown = set(value) - {"name", "description"}
    if unknown:
        raise InvalidArgumentError(f"unknown feed field(s): {', '.join(sorted(map(str, unknown)))}")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_FEED_NAME:
        raise InvalidArgumentError(f"feed.name must be 1..{MAX_FEED_NAME} characters of text")
    description = value.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_FEED_DESCRIPTION:
        raise InvalidArgumentError(f"feed.description must be text of at most {MAX_FEED_DESCRIPTION} characters")
    return {"name": name, "description": description}


@dataclasses.dataclass(frozen=True, slots=True)
class RegistryState:
    """What the registry's writer needs: the next id and the id of each listed stream."""

    next_feed_id: int = 1
    by_stream: FrozenMap[int] = dataclasses.field(default_factory=FrozenMap)


def decide_registration(
    state: RegistryState, create: Command, *, block_height: int
) -> tuple[Event | None, dict[str, Any]]:
    """List the stream created by `create` (a signed create_stream with a ``feed`` object).

    Returns (FeedRegistered event or None for an already-listed stream, the reply). Raises
    INVALID_SIGNATURE / INVALID_ARGUMENT for a forward that does not hold a valid listing.
    """
    height = require_int(block_height, "block_height")
    verify_command(create)
    if create.method != Method.CREATE_STREAM:
        raise InvalidArgumentError(f"only create_stream commands are registered, not {create.method}")
    listing = parse_feed_listing(peek_body(create, FeedListing).feed)
    existing = state.by_stream.get(create.stream_id)
    base = {"stream_id": create.stream_id, "owner": create.caller, "head_sequence": 0, "floor_sequence": 1,
            "head": 0, "floor": 1, "signing_key_id": 1}  # head/floor: the 0.1 names, deprecated
    if existing is not None:
        return None, {**base, "feed_id": existing, "duplicate": True}
    feed_id = state.next_feed_id
    reply = {**base, "feed_id": feed_id}
    event = Event(
        stream_id=REGISTRY_KEY,
        block_height=height,
        caller=create.caller,
        nonce=create.nonce,
        digest=command_digest(create),
        reply=reply,
        body=FeedRegistered(
            feed_id=feed_id,
            stream_id=create.stream_id,
            owner=create.caller,
            name=listing["name"],
            description=listing["description"],
        ),
    )
    return event, reply


def evolve_registry(state: RegistryState, event: Event) -> RegistryState:
    """The registry after a FeedRegistered event; ids must arrive in order (a gap is a corrupt log)
    and a stream is listed once (decide_registration never lists one twice), the same rules the
    projection's registry view applies, so both refuse the same forged listings."""
    body = event.body
    if not isinstance(body, FeedRegistered):
        raise InvalidArgumentError(f"the registry folds FeedRegistered events, not {event.type}")
    feed_id = require_int(body.feed_id, "feed_id", minimum=1)
    if feed_id != state.next_feed_id:
        raise InvalidArgumentError(f"feed id {feed_id} does not follow {state.next_feed_id - 1}")
    listed = state.by_stream.get(str(body.stream_id))
    if listed is not None:
        raise InvalidArgumentError(f"stream {body.stream_id!r} is already feed {listed}")
    return RegistryState(feed_id + 1, state.by_stream.set(str(body.stream_id), feed_id))
