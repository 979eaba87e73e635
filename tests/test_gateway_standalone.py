"""The command gateway on its own: it takes the commands, the projections answer only reads.

A stack whose projection runs with ``WATCHTOWER_GATEWAY=0`` beside a ``watchtower.gateway.main``
process: a command posted to the gateway is decided by the worker and becomes visible on the
projection; the projection refuses ``POST /v1/commands`` (it is not the write side) and the gateway
serves no read. The gateway keeps the API's contract: spec JSON errors, the body limit, health,
and its part of the OpenAPI document.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from stack_fixture import start_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import Publisher
from watchtower.client.subscriber import Subscriber
from watchtower.local.stack import ServiceSet
from watchtower.protocol.errors import StaleSequenceError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def split(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("gateway-logs"), gateway=True) as services:
        yield services


def gateway_url(services: ServiceSet) -> str:
    return services.urls["gateway-g1"]


def test_a_command_through_the_gateway_is_decided_and_read_back_from_the_projection(split: ServiceSet) -> None:
    owner, key = Caller(gateway_url(split)), nacl.signing.SigningKey.generate()
    sid = f"g-{uuid.uuid4().hex[:10]}"
    assert owner.ok("create_stream", sid, {"publisher_key_hex": bytes(key.verify_key).hex()})["stream_id"] == sid
    # The projection folds the creation asynchronously; the Publisher starts from the projected head.
    wait_for(lambda: http("GET", f"{split.api_url}/v1/streams/{sid}/head")[0] == 200, what="stream projected")
    api = ApiClient(split.api_url, commands_url=gateway_url(split))
    account = Account(owner.key, name="gw-owner", home=split.log_dir)  # clock nonces: above the Caller's 1
    publisher = Publisher(api, account, sid, key)
    assert [publisher.publish("tick", b"{}")["sequence"] for _ in range(3)] == [1, 2, 3]
    page = Subscriber(api, sid).poll_page(10, min_head=3, wait_ms=30_000)
    assert [m.sequence for m in page.messages] == [1, 2, 3]
    other = Publisher(api, account, sid, key)
    other.publish("tick", b"{}")
    with pytest.raises(StaleSequenceError):
        publisher.publish("tick", b"{}")  # the gateway carries the worker's refusal with its code


def test_the_projection_answers_reads_only(split: ServiceSet) -> None:
    status, body = http("POST", f"{split.api_url}/v1/commands", {"command": {}})
    assert status == 404
    assert body["error"]["code"] == "INVALID_ARGUMENT"


def test_the_gateway_serves_no_read_and_its_errors_are_spec_json(split: ServiceSet) -> None:
    url = gateway_url(split)
    status, body = http("GET", f"{url}/v1/feeds")
    assert (status, body["error"]["code"]) == (404, "INVALID_ARGUMENT")
    for payload, code, expected in ((b"not json", 400, "INVALID_ARGUMENT"),
                                    (b'{"command": {}, "timeout_s": "soon"}', 400, "INVALID_ARGUMENT"),
                                    (b'{"command": {}}', 400, "INVALID_ARGUMENT"),
                                    (b"x" * 300_000, 413, "PAYLOAD_TOO_LARGE")):
        req = urllib.request.Request(f"{url}/v1/commands", data=payload, method="POST")  # noqa: S310
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)  # noqa: S310
        assert refused.value.code == code
        assert json.loads(refused.value.read())["error"]["code"] == expected
    status, body = http("GET", f"{url}/v1/commands")
    assert (status, body["error"]["code"]) == (405, "INVALID_ARGUMENT")


def test_the_gateway_reports_health_and_documents_only_its_routes(split: ServiceSet) -> None:
    wait_for(lambda: http("GET", f"{gateway_url(split)}/v1/health")[1].get("ready") is True, what="gateway ready")
    status, health = http("GET", f"{gateway_url(split)}/v1/health")
    assert status == 200
    assert health["role"] == "gateway"
    assert health["broker"]["reachable"] is True
    status, doc = http("GET", f"{gateway_url(split)}/openapi.json")
    assert status == 200
    assert set(doc["paths"]) == {"/v1/commands", "/v1/commands/batch", "/v1/health", "/v1/feeds/{feed_id}/events"}
    _, full = http("GET", f"{split.api_url}/openapi.json")
    assert doc["paths"]["/v1/commands"] == full["paths"]["/v1/commands"]
    assert doc["paths"]["/v1/commands/batch"] == full["paths"]["/v1/commands/batch"]
    assert doc["paths"]["/v1/feeds/{feed_id}/events"] == full["paths"]["/v1/feeds/{feed_id}/events"]
