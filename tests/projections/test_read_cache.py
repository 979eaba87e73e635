"""The payload cache serves get_since pages in their served form, decoded once, within its bytes."""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest

from watchtower.projections import log_reader
from watchtower.projections.fold import verified_sequence
from watchtower.projections.log_reader import PayloadCache
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.actor import decide
from watchtower.protocol.stream.state import StreamState
from watchtower.protocol.stream.views import apply_event, new_tables
from watchtower.schemas.records import decode_message, decode_message_record, encode_message

KEY = nacl.signing.SigningKey(b"\x05" * 32)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Count the records the cache decodes."""
    decodes: list[bytes] = []

    def decode(raw: bytes) -> dict[str, Any]:
        decodes.append(raw)
        return decode_message_record(raw)
    monkeypatch.setattr(log_reader, "decode_message_record", decode)
    return decodes


def _record(sequence: int, size: int = 1024) -> bytes:
    return encode_message(sign_message(stream_id="s", sequence=sequence, timestamp_unix_ms=sequence, kind="t",
                                       payload=bytes([sequence % 256]) * size, signing_key=KEY,
                                       tags={"n": sequence}))


def test_a_cached_message_is_served_as_its_decoded_form_without_decoding_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PayloadCache(max_bytes=1 << 20)
    raws = {seq: _record(seq) for seq in range(1, 11)}
    for seq, raw in raws.items():
        cache.put("s", seq, raw, decode_message(raw))  # as the fold does: it has decoded the record already
    decodes = _counting(monkeypatch)
    for _ in range(3):
        for seq, raw in raws.items():
            headers, served = cache.served("s", seq, cache.get("s", seq) or b"")
            assert served == decode_message(raw).to_json_dict()
            assert headers == decode_message(raw).headers()
    assert decodes == []


def test_a_page_read_from_the_log_is_decoded_once_and_then_served_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PayloadCache(max_bytes=1 << 20)
    raw = _record(7)
    decodes = _counting(monkeypatch)
    first = cache.served("s", 7, raw)  # a cold read: not cached yet
    assert cache.get("s", 7) == raw
    assert cache.served("s", 7, raw) is first
    assert len(decodes) == 1


def test_served_forms_count_against_the_cache_bytes() -> None:
    cache = PayloadCache(max_bytes=64 * 1024)
    for seq in range(1, 200):
        raw = _record(seq)
        cache.put("s", seq, raw, decode_message(raw))
        cache.served("s", seq, raw)
        assert cache.bytes <= cache.max_bytes
    assert cache.get("s", 1) is None  # evicted
    assert cache.get("s", 199) is not None


def test_a_message_found_by_a_verifying_scan_is_served_without_a_second_decode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold read of a stream this worker has no index of scans the log with a picker that decodes
    and verifies each record; what it decoded is what the page is served from."""
    owner = nacl.signing.SigningKey(b"\x06" * 32)
    create = sign_command(owner, "create_stream", "s", 1, {"publisher_key": bytes(KEY.verify_key)})
    tables = new_tables()
    apply_event(tables, decide(StreamState.initial("s"), create, block_height=1).events[0])
    decoded: dict[int, Any] = {}
    pick = verified_sequence("s", tables["streams"]["s"], decoded)
    raw, forged = _record(3), encode_message(sign_message(
        stream_id="s", sequence=4, timestamp_unix_ms=4, kind="t", payload=b"x",
        signing_key=nacl.signing.SigningKey(b"\x07" * 32)))
    assert pick(0, raw) == 3
    assert pick(1, forged) is None, "a record that does not verify under the stream's key is not picked"
    assert sorted(decoded) == [3]
    cache = PayloadCache(max_bytes=1 << 20)
    cache.put("s", 3, raw, decoded[3])
    decodes = _counting(monkeypatch)
    headers, served = cache.served("s", 3, raw)
    assert (headers, served) == (decode_message(raw).headers(), decode_message(raw).to_json_dict())
    assert decodes == []
