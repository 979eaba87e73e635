"""Completeness proofs of filtered pages on a real stack (broker, stream-actor worker, projection).

The projection builds the proof from the messages topic; the SDK verifies it against the key
schedule. A tampered answer (the real API's answer rewritten by a wrapper around `ApiClient`,
Kafka untouched) fails the check in the SDK: nothing of the page is delivered, the cursor stays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
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
from stack_fixture import stack  # noqa: F401 (the fixture)

from watchtower.cli import feed_cmd
from watchtower.cli.main import _register, cli
from watchtower.client.fake import FakeApi
from watchtower.client.http import ApiClient
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import (
    InvalidArgumentError,
    InvalidSignatureError,
    MalformedRecordError,
    WatchtowerError,
)

pytestmark = pytest.mark.integration

SID = "s-proof-stack"


@pytest.fixture(scope="module")
def api(stack: ServiceSet) -> ApiClient:  # noqa: F811
    client = ApiClient(stack.api_url)
    publish_script(client, SID)
    # The projection folds asynchronously: wait (event-driven, a long poll) until it shows the head.
    client.get_since(SID, LENGTH - 1, 1, min_head=LENGTH, wait_ms=30_000)
    return client


def test_the_sdk_verifies_a_real_filtered_page_with_its_proof(api: ApiClient) -> None:
    wrapped = TamperingApi(api)
    sub = Subscriber(wrapped, SID, 0, BTC, proof=True)
    first, rest = sub.poll_page(8), sub.poll_page(100)  # a page boundary between two skipped messages
    assert [m.sequence for m in (*first.messages, *rest.messages)] == BTC_SEQUENCES
    assert sub.cursor == LENGTH
    assert all(kw.get("proof") is True for kw in wrapped.asked)


def test_the_real_proof_equals_the_log_without_payloads_and_the_fakes(api: ApiClient) -> None:
    real = api.get_since(SID, 0, 100, filter=BTC, proof=True)
    log = api.get_since(SID, 0, 100)["messages"]
    withheld = [{k: v for k, v in m.items() if k != "payload_inline_hex"} for m in log
                if m["sequence"] not in BTC_SEQUENCES]
    assert real["proof"] == {"version": 1, "skipped": withheld}
    fake = FakeApi()
    publish_script(fake, SID)
    assert fake.get_since(SID, 0, 100, filter=BTC, proof=True) == real


def test_a_plain_page_is_unchanged_and_proof_is_a_strict_boolean(api: ApiClient) -> None:
    plain = api.get_since(SID, 0, 100, filter=BTC)
    assert "proof" not in plain
    assert [m["sequence"] for m in plain["messages"]] == BTC_SEQUENCES
    assert api.get_since(SID, 0, 100, proof=True)["proof"] == {"version": 1, "skipped": []}
    with pytest.raises(InvalidArgumentError, match="proof must be true or false"):
        api.request("GET", f"/v1/streams/{SID}/messages", query={"proof": "maybe"})


@pytest.mark.parametrize(("tamper", "error"), [
    (remove_message(6), MalformedRecordError),
    (hide_in_proof(9), MalformedRecordError),
    (swap_messages(1, 2), MalformedRecordError),
    (flip_skipped_signature(12), InvalidSignatureError),
], ids=["matching message removed", "matching message hidden in the proof", "two messages swapped",
        "skipped entry's signature altered"])
def test_a_tampered_real_page_fails_the_check_in_the_sdk(api: ApiClient, tamper: Tamper,
                                                         error: type[WatchtowerError]) -> None:
    sub = Subscriber(TamperingApi(api, tamper), SID, 0, BTC, proof=True)
    with pytest.raises(error):
        sub.poll_page(100)
    assert sub.cursor == 0


def test_cli_get_since_with_proof(api: ApiClient, stack: ServiceSet, tmp_path: Path,  # noqa: F811
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.setenv("WATCHTOWER_API", stack.api_url)
    _register()
    result = CliRunner().invoke(cli, ["feed", SID, "get-since", "--cursor", "0", "--filter", json.dumps(BTC),
                                      "--proof", "--json"])
    assert result.exit_code == 0, result.output
    page: dict[str, Any] = json.loads(result.output)
    assert [m["sequence"] for m in page["messages"]] == BTC_SEQUENCES
    assert page["proven_complete"] is True
    human = CliRunner().invoke(cli, ["feed", SID, "get-since", "--cursor", "0", "--filter", json.dumps(BTC),
                                     "--proof"])
    assert human.exit_code == 0, human.output
    assert f"{len(BTC_SEQUENCES)} verified message(s) (proven complete)" in human.output


def test_cli_get_since_with_proof_fails_on_a_tampered_answer(api: ApiClient, stack: ServiceSet,  # noqa: F811
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class HidingApiClient(ApiClient):
        """The real client, with matching message #6 left out of every answer."""

        def get_since(self, *args: Any, **kw: Any) -> dict[str, Any]:
            answer = super().get_since(*args, **kw)
            remove_message(6)(answer)
            return answer

    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.setenv("WATCHTOWER_API", stack.api_url)
    monkeypatch.setattr(feed_cmd, "ApiClient", HidingApiClient)
    _register()
    args = ["feed", SID, "get-since", "--cursor", "0", "--filter", json.dumps(BTC)]
    unproven = CliRunner().invoke(cli, args)
    assert unproven.exit_code == 0, unproven.output
    assert "9 verified message(s)" in unproven.output  # the hole the proof closes
    proven = CliRunner().invoke(cli, [*args, "--proof"])
    assert proven.exit_code != 0
    assert isinstance(proven.exception, MalformedRecordError), proven.output
    assert "first missing: 6" in proven.exception.message
