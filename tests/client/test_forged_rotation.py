"""The forged-rotation scenario on a real plaintext stack: two independent defences.

An attacker with write access to the broker writes a PublisherKeyRotated event putting its own key
in force, plus a message signed by that key, straight to the topics.

1. The log side: the projection (like the worker) refuses the rotation, because its carried
   command is not the owner's signed rotate_publisher_key (it is quarantined with that reason), so
   the API keeps serving the owner's key chain and the owner's next publish succeeds.
2. The client side, on its own: even when the API answers with the forged key (a compromised or
   impersonated API, here an HTTP proxy in front of the real one that edits the key history and
   the page), the SDK verifies the key chain from the owner's address and refuses with
   INVALID_SIGNATURE naming the forged key, and ``watchtower feed ID get-since`` exits non-zero.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from click.testing import CliRunner
from confluent_kafka import Producer
from stack_fixture import stack  # noqa: F401 (the fixture)

from watchtower.cli.main import _register, cli
from watchtower.client.http import ApiClient
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidSignatureError, WatchtowerError
from watchtower.protocol.events import PublisherKeyRotated
from watchtower.protocol.signed_command import command_digest, sign_command
from watchtower.protocol.signing import sign_message
from watchtower.protocol.stream.key_chain import command_json
from watchtower.protocol.stream.state import Event
from watchtower.schemas.records import encode_message
from watchtower.schemas.wire import encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration


class Scenario:
    """A stream with two messages, then the attacker's forged rotation and message on the topics."""

    def __init__(self, services: ServiceSet) -> None:
        self.stack = services
        self.owner = Caller(services.api_url)
        self.publisher = nacl.signing.SigningKey.generate()
        self.attacker = nacl.signing.SigningKey.generate()
        self.sid = f"forged-{uuid.uuid4().hex[:10]}"
        self.owner.ok("create_stream", self.sid, {"publisher_key_hex": bytes(self.publisher.verify_key).hex()})
        self.head = 0
        self.publish()
        self.publish()
        self.wait_head(2)
        rotate = sign_command(self.attacker, "rotate_publisher_key", self.sid, 1,
                              {"new_key": bytes(self.attacker.verify_key)})
        self.forged_entry = {"signing_key_id": 2, "publisher_key": bytes(self.attacker.verify_key).hex(),
                             "public_key_hex": bytes(self.attacker.verify_key).hex(), "effective_sequence": 3,
                             "command": rotate.to_dict()}
        forged = Event(stream_id=self.sid, block_height=1, caller=rotate.caller, nonce=rotate.nonce,
                       digest=command_digest(rotate),
                       reply={"old_signing_key_id": 1, "signing_key_id": 2, "effective_sequence": 3},
                       body=PublisherKeyRotated(
                           stream_id=self.sid, old_key=bytes(self.publisher.verify_key),
                           new_key=bytes(self.attacker.verify_key), old_signing_key_id=1, new_signing_key_id=2,
                           effective_sequence=3, command=command_json(rotate)))
        self.forged_message = sign_message(stream_id=self.sid, sequence=3, timestamp_unix_ms=1_700_000_000_003,
                                           kind="tick", payload=b'{"pwned":true}', signing_key=self.attacker,
                                           signing_key_id=2)
        self.produce("events", encode_event(forged))
        self.produce("messages", encode_message(self.forged_message))

    @property
    def owner_address(self) -> str:
        return address_from_public_key(bytes(self.owner.key.verify_key))

    def publish(self) -> dict[str, Any]:
        seq = self.head + 1
        msg = sign_message(stream_id=self.sid, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq,
                           kind="tick", payload=json.dumps({"n": seq}).encode(), signing_key=self.publisher)
        reply = self.owner.ok("publish", self.sid, msg.to_json_dict())
        self.head = seq
        return reply

    def wait_head(self, head: int) -> None:
        def reached() -> bool:
            status, body = http("GET", f"{self.stack.api_url}/v1/streams/{self.sid}/head")
            return status == 200 and body["head_sequence"] == head
        wait_for(reached, what=f"{self.sid} to reach head {head}")

    def produce(self, topic: str, value: bytes) -> None:
        """What anyone who can reach the (unauthenticated) broker can do."""
        name = topic_name(topic, self.stack.prefix)
        producer = Producer(kafka_config(self.stack.bootstrap))
        partitions = len(producer.list_topics(name, timeout=30).topics[name].partitions)
        producer.produce(name, key=self.sid.encode(), value=value,
                         partition=partition_for_key(self.sid.encode(), partitions))
        assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def scenario(stack: ServiceSet) -> Scenario:  # noqa: F811
    return Scenario(stack)


def _quarantine_reasons(services: ServiceSet) -> list[str]:
    status, health = http("GET", f"{services.api_url}/v1/health")
    assert status == 200
    return [r["reason"] for r in health["quarantined"]["recent"]]


def test_the_projection_refuses_the_forged_rotation_and_the_owner_keeps_publishing(scenario: Scenario) -> None:
    forged_key = bytes(scenario.attacker.verify_key).hex()
    wait_for(lambda: any(forged_key in r and "INVALID_SIGNATURE" in r for r in _quarantine_reasons(scenario.stack)),
             what="the forged rotation to be quarantined")
    api = ApiClient(scenario.stack.api_url)
    assert [e["publisher_key"] for e in api.key_history(scenario.sid)["entries"]] == [
        bytes(scenario.publisher.verify_key).hex()]
    assert scenario.publish()["sequence"] == 3  # the owner's key is still the one in force
    scenario.wait_head(3)
    subscriber = Subscriber(api, scenario.sid, 0, expected_owner=scenario.owner_address)
    page = subscriber.poll_page(10)
    assert [m.sequence for m in page.messages] == [1, 2, 3]
    assert b"pwned" not in b"".join(m.payload_inline for m in page.messages)


class EditingProxy:
    """An HTTP API in front of the real one that serves the attacker's key and message: what a
    compromised API (or one the attacker's rotation reached before this fix) would answer."""

    def __init__(self, upstream: str, scenario: Scenario) -> None:
        self.upstream, self.scenario = upstream.rstrip("/"), scenario
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = proxy.forward(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def forward(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.upstream + path, timeout=30) as response:  # noqa: S310 (loopback)
                status, body = response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
        route = urlsplit(path).path
        if status == 200 and route.endswith(f"/{self.scenario.sid}/keys"):
            body["entries"] = [*body["entries"][:1], self.scenario.forged_entry]
        elif status == 200 and route.endswith(f"/{self.scenario.sid}/messages"):
            body["messages"] = [m for m in body["messages"] if m["sequence"] < 3]
            body["messages"].append(self.scenario.forged_message.to_json_dict())
            body.update(head_sequence=3, head=3, next_cursor=3)
        return status, body

    def __enter__(self) -> EditingProxy:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(scenario: Scenario) -> Iterator[EditingProxy]:
    with EditingProxy(scenario.stack.api_url, scenario) as running:
        yield running


def test_the_sdk_refuses_a_forged_key_served_by_the_api(scenario: Scenario, proxy: EditingProxy) -> None:
    forged_key = bytes(scenario.attacker.verify_key).hex()
    for expected_owner in (None, scenario.owner_address):
        subscriber = Subscriber(ApiClient(proxy.url), scenario.sid, 2, expected_owner=expected_owner)
        with pytest.raises(InvalidSignatureError, match=f"key 2 \\(0x{forged_key}\\).*not by the owner") as info:
            subscriber.poll_page(10)
        assert info.value.code == "INVALID_SIGNATURE"
        assert subscriber.cursor == 2  # nothing of the page was delivered


def test_the_cli_get_since_exits_non_zero_on_a_forged_key(
        scenario: Scenario, proxy: EditingProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _register()
    result = CliRunner().invoke(cli, ["feed", scenario.sid, "get-since", "--cursor", "2", "--json",
                                      "--api", proxy.url])
    assert result.exit_code != 0
    assert isinstance(result.exception, WatchtowerError), result.output
    assert result.exception.code == "INVALID_SIGNATURE"
    assert bytes(scenario.attacker.verify_key).hex() in result.exception.message
    assert '"verified": true' not in result.output
    # The same command against the genuine API verifies and reads the owner's messages.
    genuine = CliRunner().invoke(cli, ["feed", scenario.sid, "get-since", "--cursor", "0", "--json",
                                       "--api", scenario.stack.api_url, "--owner", scenario.owner_address])
    assert genuine.exit_code == 0, genuine.output
    assert json.loads(genuine.output)["verified"] is True
