"""The long schemathesis run: every operation of the OpenAPI document against a real stack.

``python -m fuzz.run --decoder http-api --runs N`` starts an embedded KRaft broker (or uses
``WATCHTOWER_TEST_BOOTSTRAP``), a worker and a projection serving the API, the way the suite's
``tests/projections/test_http_openapi_fuzz.py`` does, creates one stream with a message so reads
also reach real data, then sends N generated requests per operation and mode (valid inputs, and
invalid ones where an input can be invalid). It reports examples per operation, the 5xx count
(must be 0), schema breaks (an answer that does not match the document) and 4xx answers whose
error JSON lacks a spec code.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SEED = 20261122


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _broker(tmp: Path) -> Iterator[str]:
    existing = os.environ.get("WATCHTOWER_TEST_BOOTSTRAP")
    if existing:
        yield existing
        return
    from watchtower.local.broker import LocalKafka
    from watchtower.local.config import ClusterSpec

    kafka = LocalKafka(ClusterSpec(tmp / "kafka", _free_port(), _free_port(), 1, heap_mb=768))
    kafka.up()
    try:
        yield kafka.spec.bootstrap
    finally:
        kafka.down()


def _http(method: str, url: str, body: object | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,  # noqa: S310 - the local API
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _known_stream(api: str) -> str:
    import nacl.signing

    from watchtower.protocol.signed_command import sign_command
    from watchtower.protocol.signing import sign_message

    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    sid = f"fz-{uuid.uuid4().hex[:8]}"
    create = sign_command(owner, "create_stream", sid, 1, {"publisher_key": bytes(publisher.verify_key),
                                                           "feed": {"name": "fuzz", "description": "fuzzed"}})
    assert _http("POST", f"{api}/v1/commands", {"command": create.to_dict()})[0] == 200
    msg = sign_message(stream_id=sid, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}", signing_key=publisher)
    publish = sign_command(owner, "publish", sid, 2, msg.to_json_dict())
    assert _http("POST", f"{api}/v1/commands", {"command": publish.to_dict()})[0] == 200
    deadline = time.monotonic() + 60
    while _http("GET", f"{api}/v1/streams/{sid}/head")[1].get("head_sequence") != 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the fuzz stream's message never became visible")
        time.sleep(0.2)
    return sid


def error_code_check(ctx: Any, response: Any, case: Any) -> None:  # noqa: ARG001 - schemathesis's signature
    """Every 4xx answer is ``{"error": {"code": <a spec code>, "message": ...}}``."""
    from watchtower.protocol.errors import known_error_codes

    if 400 <= response.status_code < 500:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        if code not in known_error_codes():
            raise AssertionError(f"{case.operation.label} answered {response.status_code} without a spec code: "
                                 f"{str(body)[:200]}")


def runs_of(openapi: dict[str, Any]) -> list[tuple[Any, str]]:
    """(generation mode, operation label): every operation positive, and negative where an input can
    be invalid (a query parameter, a typed path parameter or a body)."""
    import schemathesis
    from schemathesis import GenerationMode

    out = []
    schema: Any = schemathesis.openapi.from_dict(openapi)
    for result in schema.get_all_operations():
        op = result.ok()
        out.append((GenerationMode.POSITIVE, op.label))
        spec = openapi["paths"][op.path][op.method.lower()]
        typed = [p for p in spec.get("parameters", []) if p["in"] == "query" or p["schema"]["type"] != "string"]
        if typed or spec.get("requestBody"):
            out.append((GenerationMode.NEGATIVE, op.label))
    return out


def fuzz_operations(api: str, known_stream: str, examples: int) -> dict[str, Any]:
    """Send `examples` generated requests per (operation, mode); the counts of what came back."""
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    from watchtower.http.openapi import OPENAPI

    schema: Any = schemathesis.openapi.from_dict(OPENAPI)
    operations = {op.ok().label: op.ok() for op in schema.get_all_operations()}
    per_op: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    breaks: list[str] = []
    missing_codes: list[str] = []

    def one(case: Any, label: str) -> None:
        if case.query and "min_head" in case.query:
            case.query["wait_ms"] = 0  # long polls would only spend the run's time waiting
        response = case.call(base_url=api, timeout=30)
        per_op[label] += 1
        statuses[response.status_code] += 1
        for check in (not_a_server_error, status_code_conformance, content_type_conformance,
                      response_schema_conformance):
            try:
                case.validate_response(response, checks=[check])
            except Exception as exc:  # schemathesis reports a failed check as an exception
                breaks.append(f"{label}: {check.__name__}: {' '.join(str(exc).split())[:300]}")
        try:
            error_code_check(None, response, case)
        except AssertionError as exc:
            missing_codes.append(str(exc))

    for mode, label in runs_of(OPENAPI):
        operation = operations[label]
        strategy = operation.as_strategy(generation_mode=mode)
        if "{stream_id}" in operation.path and mode is GenerationMode.POSITIVE:
            strategy = strategy | operation.as_strategy(generation_mode=mode,
                                                        path_parameters={"stream_id": known_stream})
        _run_cases(strategy, examples, lambda case, label=label: one(case, label))
    return {"examples_per_operation": dict(sorted(per_op.items())), "statuses": dict(sorted(statuses.items())),
            "server_errors": sum(n for s, n in statuses.items() if s >= 500), "schema_breaks": len(breaks),
            "schema_break_samples": sorted(set(breaks))[:20], "missing_codes": len(missing_codes),
            "missing_code_samples": sorted(set(missing_codes))[:20]}


def _run_cases(strategy: Any, examples: int, each: Any) -> None:
    from hypothesis import HealthCheck, given, seed, settings

    @seed(SEED)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        each(case)

    run()


def run_http_api(examples: int) -> dict[str, Any]:
    """The whole live run (broker, stack, stream, schemathesis); returns the summary."""
    from watchtower.local.stack import ServiceSet
    from watchtower.topics.admin import ensure_topics
    from watchtower.topics.catalogue import catalogue

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-http-") as tmp, _broker(Path(tmp)) as bootstrap:
        prefix = f"fz{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, catalogue(prefix, partitions=3))
        services = ServiceSet(bootstrap, prefix, Path(tmp, "logs"), api_port=_free_port())
        try:
            services.start_worker("w1")
            services.start_projection("p1", port=services.api_port, gateway=True)
            services.wait_ready()
            stream = _known_stream(services.api_url)
            fuzz_started = time.monotonic()
            summary = fuzz_operations(services.api_url, stream, examples)
            summary["fuzz_seconds"] = round(time.monotonic() - fuzz_started, 1)
        finally:
            services.stop()
    summary["decoder"] = "http-api"
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary
