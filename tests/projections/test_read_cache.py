"""The payload cache serves get_since pages in their served form, decoded once, within its bytes."""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest

from watchtower.projections import log_reader
from watchtower.projections.log_reader import PayloadCache
from watchtower.protocol.signing import sign_message
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
