"""Schemathesis fuzzes the running key manager against its own OpenAPI document.

No answer may be a 5xx; every answer matches the document (status, content type, body, errors
included); every 4xx carries a spec code. A structurally valid request is still unsigned or signed
by nobody the service knows, so the fuzz exercises the refusals; the positive paths are
tests/keymgr/test_keymgr_encrypt.py and test_keymgr_service_access.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from api_calls import http
from hypothesis import HealthCheck, given, seed, settings
from keymgr_harness import keymgr_stack
from openapi_checks import CHECKS
from schemathesis import GenerationMode

import watchtower.keymgr.http
from watchtower.keymgr.openapi import OPENAPI
from watchtower.local.stack import ServiceSet

pytestmark = pytest.mark.integration

EXAMPLES = 30


@pytest.fixture(scope="module")
def keymgr(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    with keymgr_stack(kafka_bootstrap, tmp_path_factory.mktemp("keymgr-fuzz")) as (services, _kek_file, _kek):
        yield services


def test_the_served_document_is_the_one_fuzzed_and_documents_every_route(keymgr: ServiceSet) -> None:
    assert keymgr.keymgr_url is not None
    assert http("GET", f"{keymgr.keymgr_url}/openapi.json") == (200, OPENAPI)
    source = Path(watchtower.keymgr.http.__file__ or "").read_text(encoding="utf-8")
    served = set(re.findall(r'add_(?:get|post)\("([^"]+)"', source)) - {"/openapi.json"}
    assert len(served) >= 5, served
    assert served == set(OPENAPI["paths"])


def _operations() -> list[tuple[GenerationMode, str]]:
    runs = []
    for result in schemathesis.openapi.from_dict(OPENAPI).get_all_operations():
        op = result.ok()
        runs.append((GenerationMode.POSITIVE, op.label))
        if op.method.lower() == "post":
            runs.append((GenerationMode.NEGATIVE, op.label))
    return runs


@pytest.mark.parametrize(("mode", "label"), _operations())
def test_fuzzed_requests_get_no_5xx_and_answers_that_match_the_document(
        keymgr: ServiceSet, mode: GenerationMode, label: str) -> None:
    schema = schemathesis.openapi.from_dict(OPENAPI)
    operation = next(op.ok() for op in schema.get_all_operations() if op.ok().label == label)

    @seed(20261123)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        case.call_and_validate(base_url=keymgr.keymgr_url, checks=CHECKS, timeout=30)

    run()
