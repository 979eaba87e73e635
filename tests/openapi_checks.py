"""The checks every schemathesis fuzz of a Watchtower HTTP service applies to each answer."""

from __future__ import annotations

from typing import Any

from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from watchtower.protocol.errors import known_error_codes


def error_carries_a_spec_code(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx answer is ``{"error": {"code": <a spec code>, "message": ...}}``."""
    if 400 <= response.status_code < 500:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        assert code in known_error_codes(), (f"{case.operation.label} answered {response.status_code} "
                                             f"without a spec code: {str(body)[:200]}")


#: No 5xx; a documented status, content type and body (errors included); a spec code on every 4xx.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          error_carries_a_spec_code]
