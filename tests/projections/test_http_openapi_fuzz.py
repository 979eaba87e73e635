"""Schemathesis fuzzes the running HTTP API against its own OpenAPI document.

Every operation gets valid and invalid inputs (a fixed seed and a bounded number of examples, so the
run is reproducible and short). No answer may be a 5xx, every answer must match the document (a
documented status, the documented content type, and a body that fits the documented schema, errors
included), and every 4xx must carry a spec error code. Every route the services serve is in the
document, and every operation of the document is fuzzed. The longer run of the same checks is
``python -m fuzz.run --decoder http-api`` (fuzz/http_api.py).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import schemathesis
from api_calls import Caller, http, wait_for
from hypothesis import HealthCheck, given, seed, settings
from openapi_checks import CHECKS
from schemathesis import GenerationMode

import watchtower.projections.keymgr_routes
import watchtower.projections.replay_routes
import watchtower.projections.service
from watchtower.gateway.routes import COMMANDS_PATH
from watchtower.http.openapi import OPENAPI
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signing import sign_message

pytestmark = pytest.mark.integration

EXAMPLES = 25


@pytest.fixture(scope="module")
def known_stream(stack: ServiceSet) -> str:
    """A stream with a message and a feed listing, so fuzzed reads also reach real data."""
    owner, publisher = Caller(stack.api_url), nacl.signing.SigningKey.generate()
    sid = f"fz-{uuid.uuid4().hex[:8]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex(),
                                    "feed": {"name": "fuzz", "description": "fuzzed"}})
    msg = sign_message(stream_id=sid, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}", signing_key=publisher)
    owner.ok("publish", sid, msg.to_json_dict())
    wait_for(lambda: http("GET", f"{stack.api_url}/v1/streams/{sid}/head")[1].get("head_sequence") == 1,
             what="the fuzz stream")
    return sid


def test_served_document_is_the_one_fuzzed(stack: ServiceSet) -> None:
    assert http("GET", f"{stack.api_url}/openapi.json") == (200, OPENAPI)


def _served_paths() -> set[str]:
    """Every route the projection pages and the command gateway serve (read from their source)."""
    modules = (watchtower.projections.service, watchtower.projections.keymgr_routes,
               watchtower.projections.replay_routes)
    source = "".join(Path(m.__file__ or "").read_text(encoding="utf-8") for m in modules)
    return set(re.findall(r'@page\("([^"]+)"', source)) | {COMMANDS_PATH}


def test_every_served_route_is_documented() -> None:
    served = _served_paths() - {"/openapi.json"}
    assert len(served) >= 10, served  # the pattern still finds the routes
    assert served <= set(OPENAPI["paths"]), f"served but not in the OpenAPI document: {served - set(OPENAPI['paths'])}"


def _streaming() -> set[str]:
    """Operations that answer an open stream (SSE): a request never ends, so they are not fuzzed here
    (tests/gateway/test_sse_*.py check their errors and their events)."""
    return {f"{method.upper()} {path}" for path, ops in OPENAPI["paths"].items() for method, op in ops.items()
            if op.get("x-streaming")}


def test_every_operation_of_the_document_is_fuzzed_with_valid_and_invalid_inputs() -> None:
    documented = {f"{method.upper()} {path}" for path, ops in OPENAPI["paths"].items()
                  for method in ops} - _streaming()
    fuzzed = {label for _mode, label in _runs()}
    assert fuzzed == documented
    negative = {label for mode, label in _runs() if mode is GenerationMode.NEGATIVE}
    # Operations without a query, typed path or body input cannot be sent invalid input.
    assert documented - negative <= {"GET /v1/health", "GET /v1/streams/{stream_id}",
                                     "GET /v1/streams/{stream_id}/head", "GET /v1/streams/{stream_id}/keys",
                                     "GET /v1/streams/{stream_id}/subscribers", "GET /v1/admin/digest",
                                     "GET /v1/feeds", "GET /v1/accounts/{address}",
                                     "GET /v1/streams/{stream_id}/entitlements/{account}",
                                     "GET /v1/streams/{stream_id}/key-epochs", "GET /v1/cby/supply",
                                     "GET /v1/cby/supply/local", "GET /v1/keymgr/digest",
                                     "GET /v1/replays/digest", "GET /v1/replays/local"}


def _runs() -> list[tuple[GenerationMode, str]]:
    """Every operation with valid inputs, and with invalid ones where an input can be invalid (a
    query parameter, a typed path parameter or a body; a free-form stream id cannot be)."""
    runs = []
    for result in schemathesis.openapi.from_dict(OPENAPI).get_all_operations():
        op = result.ok()
        if op.label in _streaming():
            continue
        runs.append((GenerationMode.POSITIVE, op.label))
        spec = OPENAPI["paths"][op.path][op.method.lower()]
        typed = [p for p in spec.get("parameters", []) if p["in"] == "query" or p["schema"]["type"] != "string"]
        if typed or spec.get("requestBody"):
            runs.append((GenerationMode.NEGATIVE, op.label))
    return runs


@pytest.mark.parametrize(("mode", "label"), _runs())
def test_fuzzed_requests_get_no_5xx_and_answers_that_match_the_document(
        stack: ServiceSet, known_stream: str, label: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_dict(OPENAPI)
    operation = next(op.ok() for op in schema.get_all_operations() if op.ok().label == label)
    fixed: dict[str, Any] = {}
    if "{stream_id}" in operation.path and mode is GenerationMode.POSITIVE:
        fixed["path_parameters"] = {"stream_id": known_stream}  # half the reads hit a real stream
    strategies = [operation.as_strategy(generation_mode=mode)]
    if fixed:
        strategies.append(operation.as_strategy(generation_mode=mode, **fixed))

    @seed(20261122)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(case=strategies[0] if len(strategies) == 1 else strategies[0] | strategies[1])
    def run(case: Any) -> None:
        if case.query and "min_head" in case.query:
            case.query["wait_ms"] = 0  # keep long polls out of the fuzz run's time
        case.call_and_validate(base_url=stack.api_url, checks=CHECKS, timeout=30)

    run()
