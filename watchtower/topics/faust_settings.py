"""What a Faust app needs to reach the cluster: kept apart from `connection`, which the SDK's Kafka
readers import, so that nothing the SDK reaches imports Faust."""

from __future__ import annotations

from typing import Any

from watchtower.topics.connection import current_principal


def faust_broker_settings() -> dict[str, Any]:
    """Keyword arguments for ``faust.App`` that authenticate it (empty for plaintext)."""
    principal = current_principal()
    if principal is None:
        return {}
    from faust import SASLCredentials

    ssl_context = None
    if principal.security_protocol.upper() == "SASL_SSL":
        import ssl

        ssl_context = ssl.create_default_context(cafile=principal.ssl_ca_location)
    return {"broker_credentials": SASLCredentials(username=principal.username, password=principal.password,
                                                  mechanism=principal.sasl_mechanism, ssl_context=ssl_context)}
