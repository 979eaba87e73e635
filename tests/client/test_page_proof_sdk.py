"""The SDK checks the completeness proof of filtered pages (`Subscriber(..., proof=True)`), on the
in-memory `FakeApi` wrapped by a hostile read side. The same checks on a real stack are in
test_page_proof_stack.py."""

from __future__ import annotations

import pytest
from proof_helpers import (
    BTC,
    BTC_SEQUENCES,
    LENGTH,
    Tamper,
    TamperingApi,
    flip_skipped_signature,
    hide_in_proof,
    publish_script,
    remove_message,
    swap_messages,
)

from watchtower.client.fake import FakeApi
from watchtower.client.subscriber import Subscriber
from watchtower.protocol.errors import InvalidSignatureError, MalformedRecordError, WatchtowerError

SID = "s-proof-sdk"


@pytest.fixture(scope="module")
def fake() -> FakeApi:
    api = FakeApi()
    publish_script(api, SID)
    return api


def test_a_proving_subscriber_delivers_an_honest_filtered_stream(fake: FakeApi) -> None:
    api = TamperingApi(fake)
    sub = Subscriber(api, SID, 0, BTC, proof=True)
    got = [m.sequence for m in sub.poll(7)] + [m.sequence for m in sub.poll(100)]
    assert got == BTC_SEQUENCES
    assert sub.cursor == LENGTH
    assert all(kw.get("proof") is True for kw in api.asked)


def test_the_fake_proof_lists_every_skipped_sequence_without_payloads(fake: FakeApi) -> None:
    answer = fake.get_since(SID, 0, 100, filter=BTC, proof=True)
    skipped = answer["proof"]["skipped"]
    assert [e["sequence"] for e in skipped] == [s for s in range(1, LENGTH + 1) if s not in BTC_SEQUENCES]
    assert all("payload_inline_hex" not in e for e in skipped)
    assert "proof" not in fake.get_since(SID, 0, 100, filter=BTC)


def test_without_a_filter_no_proof_is_asked(fake: FakeApi) -> None:
    api = TamperingApi(fake)
    assert len(Subscriber(api, SID, 0, proof=True).poll(100)) == LENGTH
    assert api.asked == [{"min_head": None, "wait_ms": None}]


@pytest.mark.parametrize(("tamper", "error"), [
    (remove_message(6), MalformedRecordError),
    (hide_in_proof(9), MalformedRecordError),
    (swap_messages(0, 1), MalformedRecordError),
    (flip_skipped_signature(10), InvalidSignatureError),  # an entry signed with the rotated key
], ids=["matching message removed", "matching message hidden in the proof", "two messages swapped",
        "skipped entry's signature altered"])
def test_a_tampered_page_fails_delivers_nothing_and_keeps_the_cursor(
        fake: FakeApi, tamper: Tamper, error: type[WatchtowerError]) -> None:
    sub = Subscriber(TamperingApi(fake, tamper), SID, 0, BTC, proof=True)
    with pytest.raises(error) as caught:
        sub.poll_page(100)
    assert caught.value.code in ("MALFORMED_RECORD", "INVALID_SIGNATURE")
    assert "report it to the stream's operator" in caught.value.message
    assert sub.cursor == 0


def test_a_server_that_drops_the_proof_is_refused(fake: FakeApi) -> None:
    def drop(answer: dict) -> None:
        del answer["proof"]

    sub = Subscriber(TamperingApi(fake, drop), SID, 0, BTC, proof=True)
    with pytest.raises(MalformedRecordError, match="no proof"):
        sub.poll_page(100)
    assert sub.cursor == 0


def test_without_proof_a_removed_matching_message_goes_unnoticed(fake: FakeApi) -> None:
    """What the proof adds: a plain filtered page cannot show that a matching message was withheld."""
    sub = Subscriber(TamperingApi(fake, remove_message(6)), SID, 0, BTC)
    assert 6 not in [m.sequence for m in sub.poll(100)]
    assert sub.cursor == LENGTH
