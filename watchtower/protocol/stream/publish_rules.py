"""The rules of a publish: authorised by its message signature, not by its command signature.

A publish is the one stream method whose command signature is never checked: the key in force at
head+1 signed this stream id, this sequence and this payload hash, and only the owner can put a
key in force. Its nonce is neither checked against nor recorded in the caller's replay
protection; the sequence is its replay protection (docs/publish-auth.md). `decide_publish` holds
the order of its checks; `actor.decide` sends every publish here. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchtower.protocol.command_auth import check_nonce
from watchtower.protocol.commands import split_publish
from watchtower.protocol.confidential import rules as confidential
from watchtower.protocol.confidential.receipt import RECEIPT_FIELD, verify_receipt
from watchtower.protocol.config import StreamConfig
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.enums import PayloadFormat
from watchtower.protocol.errors import (
    InvalidArgumentError,
    StaleSequenceError,
    StreamNotFoundError,
    UnauthorizedError,
)
from watchtower.protocol.events import StreamMessagePublished
from watchtower.protocol.signed_command import Command
from watchtower.protocol.signing import (
    message_signing_bytes,
    publish_digest,
    verify_signing_bytes_with_schedule_or_raise,
)
from watchtower.protocol.stream.decision import Decision, one_event, require_owner, require_this_stream, window_reply
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.reads import require_config as _config
from watchtower.protocol.stream.reads import require_schedule as _schedule
from watchtower.protocol.stream.ring_window import floor_for
from watchtower.protocol.stream.state import StreamState
from watchtower.protocol.validation import require_int


def decide_publish(state: StreamState, cmd: Command, height: int, deployment: Deployment) -> Decision:
    """Body: the StreamMessage JSON dict (`StreamMessage.to_json_dict`), signed for head+1.

    Order: the command's stream; a nonce within the clock's ceiling (evolve refuses events beyond
    it); existence; the command names the owner as caller (UNAUTHORIZED, before the body is read);
    the message's structure, size, stream and payload hash; an exact retry of the last publish
    (the original reply with ``"duplicate": True``); CIPHERTEXT on a paid stream; sequence ==
    head+1 (STALE_SEQUENCE, never renumbered); the signature under the key in force at head+1,
    which also refuses an older signing_key_id after a rotation; on a PLATFORM_MANAGED stream
    only, the key manager's receipt over (stream, key_epoch, payload_hash): UNAUTHORIZED if it is
    missing, INVALID_SIGNATURE if it does not verify (`ciphertext_receipt`), and UNAUTHORIZED for
    PLAINTEXT on a paid stream, so publish answers only CIP-7's publish codes plus the extensions
    docs/publish-auth.md lists. One ed25519 verify for an OPEN
    stream, two for a paid one.
    """
    require_this_stream(state, cmd)
    check_nonce(None, cmd.nonce, block_height=height)  # only the ceiling: publish nonces are not replay state
    if not state.created:
        raise StreamNotFoundError(f"stream {state.stream_id!r} does not exist; create_stream it first")
    # Not authentication (the envelope is unsigned as far as publish goes): it keeps the command's
    # claim consistent with the owner that delegated publishing to the key, and answers a
    # stranger's publish with the code CIP-7 maps.
    require_owner(state, cmd)
    config = _config(state)
    body: Mapping[str, Any] = cmd.body
    receipt: object = None
    if config.is_paid:
        # The receipt rides beside the message's fields; the message itself is parsed without it.
        body, receipt = split_publish(cmd, RECEIPT_FIELD)
    msg = StreamMessage.from_json_dict(body)  # structure, size (PAYLOAD_TOO_LARGE), format/epoch
    if msg.stream_id != state.stream_id:
        raise InvalidArgumentError(f"message.stream_id {msg.stream_id!r} differs from the command's stream id")
    msg.validate()  # payload_hash == SHA-256(payload), else INVALID_SIGNATURE
    signing_bytes = message_signing_bytes(msg)
    digest = publish_digest(signing_bytes, msg.publisher_sig)
    if msg.sequence == state.head and digest == state.last_publish_digest:
        # The very message already at head (the log verified it then): a retry, not a replay.
        return Decision((), {**publish_reply(state.head, config), "duplicate": True})
    if config.is_paid and msg.payload_format is not PayloadFormat.CIPHERTEXT:
        # UNAUTHORIZED (CIP-7's publish codes): the stream's access mode does not let anyone publish plaintext.
        raise UnauthorizedError(
            "a PLATFORM_MANAGED stream publishes CIPHERTEXT only; encrypt the payload with stream_encrypt"
        )
    if msg.sequence != state.head + 1:
        raise StaleSequenceError.for_head(expected=msg.sequence, head=state.head)
    verify_signing_bytes_with_schedule_or_raise(msg, signing_bytes, _schedule(state))
    if config.is_paid:
        # After the signature: only the owner's key learns whether its ciphertext is acceptable.
        verify_receipt(
            deployment.keymgr_public_key,
            receipt,
            stream_id=msg.stream_id,
            key_epoch=require_int(msg.key_epoch, "key_epoch"),
            payload_hash=msg.payload_hash,
        )
    reply = publish_reply(msg.sequence, config)
    if config.confidential:
        # After the signature, as the receipt: only the owner's key learns the keyload rules' verdict.
        part = confidential.check_publish(state.keyloads, msg, stream_id=state.stream_id, owner=config.owner,
                                          allowlist=state.allowlist)
        if part is not None:
            reply[confidential.REPLY_KEY] = part
    event_body = StreamMessagePublished(
        stream_id=msg.stream_id, version=msg.version, sequence=msg.sequence, kind=msg.kind,
        content_type=msg.content_type, payload_format=str(msg.payload_format), payload_hash=msg.payload_hash,
        key_epoch=msg.key_epoch, signing_key_id=msg.signing_key_id, timestamp_unix_ms=msg.timestamp_unix_ms,
    )
    return one_event(state, cmd, height, digest, reply, event_body, (msg,))


def publish_reply(sequence: int, config: StreamConfig) -> dict[str, Any]:
    """A publish's reply: its sequence and the ring window it leaves."""
    return {"sequence": sequence, **window_reply(sequence, floor_for(sequence, config.ring_buffer_capacity))}
