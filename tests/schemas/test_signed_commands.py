"""Signed command envelopes and the protocol-record adapters."""

from __future__ import annotations

import dataclasses
from typing import Any

import nacl.signing
import pytest

from watchtower.protocol import IngestionConfig, PaidStreamConfig, StreamConfig, sign_message
from watchtower.protocol.errors import InvalidSignatureError, MalformedRecordError, SchemaMismatchError
from watchtower.schemas import codec
from watchtower.schemas.commands import build_command, decode_command, encode_command, verify_command
from watchtower.schemas.records import (
    decode_message,
    encode_message,
    message_from_record,
    stream_config_from_record,
    stream_config_to_record,
)

OWNER = nacl.signing.SigningKey(b"\x07" * 32)
OTHER = nacl.signing.SigningKey(b"\x08" * 32)
OWNER_ADDRESS = "0x" + bytes(OWNER.verify_key).hex()


def message(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "stream_id": "prices",
        "sequence": 3,
        "timestamp_unix_ms": 1767225600000,
        "kind": "price_batch",
        "payload": b'{"p":1}',
        "tags": {"count": 12, "symbol": "BTC", "live": True},
        "signing_key": OWNER,
    }
    fields.update(overrides)
    return sign_message(**fields)


def test_publish_command_round_trips_and_verifies() -> None:
    msg = message()
    framed = encode_command("Publish", {"message": msg.to_record()}, signing_key=OWNER, nonce=1, request_id="r1")
    decoded = decode_command(framed, expect="Publish")
    assert decoded.record["caller"] == OWNER_ADDRESS
    # The tag 12 comes back as 12.0 from Avro; the signature still holds because it covers the Avro body.
    assert message_from_record(decoded.record["body"]["message"]) == msg


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r.update(nonce=r["nonce"] + 1),
        lambda r: r.update(request_id="other"),
        lambda r: r["body"].update(stream_id="other"),
        lambda r: r.update(caller="0x" + bytes(OTHER.verify_key).hex()),
        lambda r: r.update(signature=bytes(64)),
    ],
)
def test_any_change_to_a_signed_command_is_rejected(tamper: Any) -> None:
    record = build_command("Unsubscribe", {"stream_id": "prices"}, signing_key=OWNER, nonce=5, request_id="r")
    verify_command("Unsubscribe", record)
    tamper(record)
    with pytest.raises(InvalidSignatureError):
        verify_command("Unsubscribe", record)
    with pytest.raises(InvalidSignatureError):
        decode_command(codec.encode("Unsubscribe", record))


def test_decode_command_refuses_non_commands() -> None:
    framed = codec.encode("IngestFailed", {"stream_id": "s", "timestamp_unix_ms": 1, "reason": "x", "block_height": 1})
    with pytest.raises(SchemaMismatchError):
        decode_command(framed)
    unsubscribe = encode_command("Unsubscribe", {"stream_id": "s"}, signing_key=OWNER, nonce=1, request_id="r")
    with pytest.raises(SchemaMismatchError):
        decode_command(unsubscribe, expect="Publish")


def test_stream_message_adapter_round_trips() -> None:
    msg = message(payload_format="CIPHERTEXT", key_epoch=4, payload=bytes(64))
    assert decode_message(encode_message(msg)) == msg


def test_a_decoded_message_that_breaks_a_rule_is_malformed() -> None:
    record = message().to_record()
    record["tags"] = {"x": float("nan")}
    with pytest.raises(MalformedRecordError, match="INVALID_ARGUMENT"):
        decode_message(codec.encode("StreamMessage", record))
    record = dataclasses.replace(message()).to_record() | {"payload_inline": bytes(16385)}
    with pytest.raises(MalformedRecordError, match="PAYLOAD_TOO_LARGE"):
        decode_message(codec.encode("StreamMessage", record))


def test_stream_config_adapter_round_trips_with_ingestion_objects() -> None:
    config = StreamConfig(
        stream_id="prices",
        owner=OWNER_ADDRESS,
        publisher_key=bytes(OWNER.verify_key),
        access_mode="SUBSCRIBER_PAID",
        paid_stream_config=PaidStreamConfig(
            fee_per_key_epoch_cby=10,
            protocol_fee_bps=250,
            publisher_treasury=OWNER_ADDRESS,
            protocol_treasury="0x" + "22" * 32,
        ),
        ingestion=IngestionConfig(
            enabled=True,
            task_definition={"url": "https://x", "n": [1, 2]},
            result_schema={"type": "object"},
            num_runners=2,
            proof_type="NONE",
        ),
    )
    framed = encode_command(
        "CreateStream", {"config": stream_config_to_record(config)}, signing_key=OWNER, nonce=1, request_id="c"
    )
    body = decode_command(framed).record["body"]
    assert stream_config_from_record(body["config"]) == config


def test_a_stream_config_record_that_breaks_a_rule_is_malformed() -> None:
    record = stream_config_to_record(
        StreamConfig(stream_id="s", owner=OWNER_ADDRESS, publisher_key=bytes(OWNER.verify_key))
    )
    with pytest.raises(MalformedRecordError, match="ring_buffer_capacity"):
        stream_config_from_record(record | {"ring_buffer_capacity": 0})
